/**
 * Everything the extension does, written against an injected `vscode` API and language-client
 * factory so the command handlers can be unit-tested with small fakes (test/unit.test.ts).
 * `extension.ts` wires in the real `vscode` module and `vscode-languageclient`.
 */
import type * as vscode from 'vscode';
import {
  describeError,
  explainTable,
  statusBarView,
  statusLines,
  type ConversationTurn,
  type DescribedError,
} from './format';
import {
  Methods,
  type AskParams,
  type AskPartial,
  type AskResult,
  type ExplainParams,
  type ExplainResult,
  type ListPinsResult,
  type PinResult,
  type Range,
  type RequestOutput,
  type StatusResult,
  type UnpinResult,
} from './protocol';
import {
  missingServerMessage,
  readSettings,
  resolveLaunch,
  which as realWhich,
  type LaunchSpec,
  type Settings,
} from './settings';
import { NextEdits } from './nextEdit';
import { AnswerPanel, ContextTreeProvider, type VSCodeApi } from './views';

/** What the extension needs from a language client (the real one: vscode-languageclient). */
export interface LspClient {
  start(): Promise<void>;
  stop(): Promise<void>;
  isRunning(): boolean;
  sendRequest<R>(method: string, params: unknown, token?: vscode.CancellationToken): Promise<R>;
  sendNotification(method: string, params: unknown): Promise<void>;
  /** Subscribe to `$/progress` notifications for `token` (partial results). */
  onProgress(token: string | number, handler: (value: unknown) => void): vscode.Disposable;
  onDidChangeState(listener: (running: boolean) => void): vscode.Disposable;
  /** The server's last stderr line (for error messages), if any. */
  lastError?(): string | undefined;
}

export interface ClientHooks {
  output: vscode.LogOutputChannel;
  documentSelector: { scheme: string; language?: string }[];
  /** The server is gone for good (crashed repeatedly, or initialize failed). */
  onFatal(message: string): void;
}

export type ClientFactory = (spec: LaunchSpec, hooks: ClientHooks) => LspClient;

export interface Deps {
  vscode: VSCodeApi;
  createClient: ClientFactory;
  env: Record<string, string | undefined>;
  which?: (command: string, env: Record<string, string | undefined>, cwd?: string) => string | undefined;
  /** The extension's folder (for the next-edit gutter icon). */
  extensionUri?: vscode.Uri;
}

/** The extension's own command ids (never one of the server's SERVER_COMMANDS). */
export const COMMANDS = {
  ask: 'contenox.ask',
  askWithTestOutput: 'contenox.askWithTestOutput',
  cancelAsk: 'contenox.cancelAsk',
  explainContext: 'contenox.explainContext',
  refreshContext: 'contenox.refreshContext',
  pinFile: 'contenox.pinFile',
  unpinFile: 'contenox.unpinFile',
  showStatus: 'contenox.showStatus',
  restartServer: 'contenox.restartServer',
  showLog: 'contenox.showLog',
  newConversation: 'contenox.newConversation',
  nextEditJumpOrApply: 'contenox.nextEdit.jumpOrApply',
  nextEditDismiss: 'contenox.nextEdit.dismiss',
} as const;

export const CONTEXT_VIEW = 'contenox.context';

/** Languages whose documents are synced to the server (the server indexes these). */
export const LANGUAGES = [
  'python', 'javascript', 'javascriptreact', 'typescript', 'typescriptreact', 'go', 'rust',
  'java', 'c', 'cpp', 'lua', 'markdown',
];

const OPEN_SETTINGS = 'Open Settings';
const SHOW_LOG = 'Show Log';
const RESTART = 'Restart Server';

export interface AskOptions {
  question?: string;
  maxTokens?: number;
  /** Sent along (segment H): the definitions a traceback in them runs through lead the code. */
  outputs?: RequestOutput[];
}

/** A fresh client-chosen conversation id (PROTOCOL.md: 1–200 characters). */
export function newConversationId(): string {
  return `vscode-${Date.now()}-${Math.random().toString(36).slice(2, 10)}`;
}

export class Contenox implements vscode.Disposable {
  readonly vs: VSCodeApi;
  client: LspClient | undefined;
  /** Why the server is not running (shown again when a command needs it). */
  startError: string | undefined;
  status: StatusResult | undefined;
  readonly output: vscode.LogOutputChannel;
  readonly tree: ContextTreeProvider;
  readonly treeView: vscode.TreeView<unknown>;
  readonly statusItem: vscode.StatusBarItem;
  readonly answer: AnswerPanel;
  readonly nextEdits: NextEdits;
  private readonly disposables: vscode.Disposable[] = [];
  private clientSubs: vscode.Disposable[] = [];
  private pollTimer: ReturnType<typeof setInterval> | undefined;
  private refreshTimer: ReturnType<typeof setTimeout> | undefined;
  private polling = false;
  private explainSeq = 0;
  private askSeq = 0;
  /** The ask whose answer the panel shows (an older one, replaced or cancelled, keeps off it). */
  private panelAsk = 0;
  private askCts: vscode.CancellationTokenSource | undefined;
  /** The current conversation: every ask continues it, Explain Context shows its turns. */
  conversationId = newConversationId();
  /** Its finished turns, oldest first (what the answer panel shows above the current one). */
  history: ConversationTurn[] = [];
  /** The file and selection the conversation last asked about: a follow-up asked while no
   * file editor is active (from the panel's input) is about them too. */
  private lastTarget: { textDocument: { uri: string }; range: Range } | undefined;
  private disposed = false;

  constructor(private readonly deps: Deps) {
    const vs = (this.vs = deps.vscode);
    this.output = vs.window.createOutputChannel('Contenox', { log: true });
    this.tree = new ContextTreeProvider(vs);
    this.treeView = vs.window.createTreeView(CONTEXT_VIEW, { treeDataProvider: this.tree }) as vscode.TreeView<unknown>;
    this.treeView.message = 'Run "Contenox: Explain Context" to see what the model has in KV.';
    this.statusItem = vs.window.createStatusBarItem('contenox.status', vs.StatusBarAlignment.Right, 100);
    this.statusItem.name = 'Contenox';
    this.statusItem.command = COMMANDS.showStatus;
    this.answer = new AnswerPanel(vs, {
      ask: (question) => this.ask({ question }),
      newConversation: () => this.newConversation(),
    });
    this.disposables.push(this.output, this.treeView, this.statusItem);
    this.updateStatusBar();
    this.statusItem.show();

    const reg = (id: string, fn: (...args: any[]) => unknown) =>
      this.disposables.push(vs.commands.registerCommand(id, fn));
    reg(COMMANDS.ask, (arg?: string | AskOptions) => this.ask(arg));
    reg(COMMANDS.askWithTestOutput, () => this.askWithTestOutput());
    reg(COMMANDS.cancelAsk, () => this.cancelAsk());
    reg(COMMANDS.explainContext, () => this.explainContext());
    reg(COMMANDS.refreshContext, () => this.refreshContext(true));
    reg(COMMANDS.pinFile, (uri?: vscode.Uri) => this.pinFile(uri));
    reg(COMMANDS.unpinFile, (uri?: vscode.Uri) => this.unpinFile(uri));
    reg(COMMANDS.showStatus, () => this.showStatus());
    reg(COMMANDS.restartServer, () => this.restart());
    reg(COMMANDS.showLog, () => this.output.show(true));
    reg(COMMANDS.newConversation, () => this.newConversation());
    this.nextEdits = new NextEdits(vs, {
      request: (method, params, token) =>
        this.client?.isRunning() ? this.client.sendRequest(method, params, token) : undefined,
      notify: (method, params) => {
        if (this.client?.isRunning()) void this.client.sendNotification(method, params).catch(() => undefined);
      },
      enabled: () => vs.workspace.getConfiguration('contenox').get<boolean>('nextEdit.enabled', true),
      isSynced: (doc) => this.isSynced(doc),
      log: (message) => this.output.appendLine(message),
      gutterIcon: deps.extensionUri && vs.Uri.joinPath(deps.extensionUri, 'media', 'next-edit.svg'),
    });
    this.disposables.push(this.nextEdits);
    reg(COMMANDS.nextEditJumpOrApply, () => this.nextEdits.tab());
    reg(COMMANDS.nextEditDismiss, () => this.nextEdits.dismiss());

    // Keep the context view current while it is visible: after edits (once the server's
    // debounce has passed), on editor switches, and when the status poll sees KV change.
    this.disposables.push(
      this.treeView.onDidChangeVisibility((e) => {
        if (e.visible) this.scheduleRefresh(0);
      }),
      vs.workspace.onDidChangeTextDocument((e) => {
        if (e.contentChanges.length && this.isSynced(e.document)) {
          this.scheduleRefresh(this.settings().debounceMs + 250);
        }
      }),
      vs.window.onDidChangeActiveTextEditor(() => this.scheduleRefresh(150)),
      vs.workspace.onDidChangeConfiguration((e) => this.onConfigChanged(e)),
    );
  }

  settings(): Settings {
    const cfg = this.vs.workspace.getConfiguration('contenox');
    return readSettings((key, fallback) => cfg.get(key, fallback));
  }

  private workspaceFolder(): string | undefined {
    return this.vs.workspace.workspaceFolders?.[0]?.uri.fsPath;
  }

  // -- server lifecycle ----------------------------------------------------------------------

  /** Start the language server; on failure show an actionable error and return false. */
  async start(): Promise<boolean> {
    this.startError = undefined;
    const folder = this.workspaceFolder();
    const spec = resolveLaunch(this.settings(), this.deps.env, folder);
    const which = this.deps.which ?? realWhich;
    this.output.appendLine(`[contenox] server: ${[spec.command, ...spec.args].join(' ')} (from ${spec.source})`);
    if (!which(spec.command, this.deps.env, folder)) {
      this.fail(missingServerMessage(spec));
      return false;
    }
    const client = this.deps.createClient(spec, {
      output: this.output,
      documentSelector: LANGUAGES.map((language) => ({ scheme: 'file', language })),
      onFatal: (message) => this.fail(message),
    });
    this.client = client;
    this.clientSubs.push(
      client.onDidChangeState((running) => {
        if (!running) this.status = undefined;
        this.updateStatusBar();
      }),
    );
    try {
      await client.start();
    } catch (err) {
      // The server's own last words say more than the client's "connection got disposed".
      await new Promise((r) => setTimeout(r, 100));
      const reason = client.lastError?.() ||
        (err instanceof Error ? err.message : String(err)).split('\n')[0];
      this.fail(
        `Contenox: the language server "${spec.command}" failed to start: ${reason}. ` +
          'Its log is in the Contenox output; check the contenox.server.* settings.',
      );
      return false;
    }
    this.startError = undefined;
    this.updateStatusBar();
    this.startPolling();
    void this.pollStatus();
    if (this.treeView.visible) this.scheduleRefresh(0);
    return true;
  }

  async stop(): Promise<void> {
    this.stopPolling();
    const client = this.client;
    this.client = undefined;
    this.clientSubs.forEach((d) => d.dispose());
    this.clientSubs = [];
    this.status = undefined;
    if (client) {
      try {
        await client.stop();
      } catch {
        // already gone
      }
    }
    this.updateStatusBar();
  }

  async restart(): Promise<boolean> {
    await this.stop();
    return this.start();
  }

  /** Record why the server is unavailable and tell the user what to do about it. */
  private fail(message: string): void {
    if (this.startError === message) return; // already told
    this.startError = message;
    this.stopPolling();
    this.updateStatusBar();
    this.output.appendLine(`[contenox] ${message}`);
    void this.offerFixes(this.vs.window.showErrorMessage(message, OPEN_SETTINGS, SHOW_LOG, RESTART));
  }

  private async offerFixes(choice: Thenable<string | undefined>): Promise<void> {
    const picked = await choice;
    if (picked === OPEN_SETTINGS) {
      await this.vs.commands.executeCommand('workbench.action.openSettings', 'contenox.');
    } else if (picked === SHOW_LOG) {
      this.output.show(true);
    } else if (picked === RESTART) {
      await this.restart();
    }
  }

  private isRunning(): boolean {
    return !!this.client && this.client.isRunning();
  }

  /** The running client, or undefined after telling the user why there is none. */
  private requireClient(): LspClient | undefined {
    if (this.client && this.client.isRunning()) return this.client;
    const message = this.startError ??
      'Contenox: the language server is not running. Restart it, or see the Contenox output for its log.';
    void this.offerFixes(this.vs.window.showErrorMessage(message, RESTART, SHOW_LOG, OPEN_SETTINGS));
    return undefined;
  }

  private showRequestError(what: string, d: DescribedError): void {
    void this.offerFixes(this.vs.window.showErrorMessage(`Contenox: ${what} failed: ${d.message}`, SHOW_LOG));
  }

  private onConfigChanged(e: vscode.ConfigurationChangeEvent): void {
    if (!e.affectsConfiguration('contenox')) return;
    if (e.affectsConfiguration('contenox.statusRefreshMs')) this.startPolling();
    const needsRestart = ['server', 'profile', 'model', 'debounceMs', 'prefillOnIdle', 'maxTokens', 'logLevel']
      .some((k) => e.affectsConfiguration(`contenox.${k}`));
    if (needsRestart && !this.client) {
      // Not running (e.g. it was not found): just try again with the new settings.
      void this.start();
    } else if (needsRestart) {
      void this.vs.window
        .showInformationMessage('Contenox: restart the language server to apply the new settings.', RESTART)
        .then((picked) => (picked === RESTART ? this.restart() : undefined));
    }
  }

  // -- status --------------------------------------------------------------------------------

  private startPolling(): void {
    this.stopPolling();
    const ms = this.settings().statusRefreshMs;
    if (ms > 0 && this.client && !this.disposed) {
      this.pollTimer = setInterval(() => void this.pollStatus(), ms);
    }
  }

  private stopPolling(): void {
    if (this.pollTimer) clearInterval(this.pollTimer);
    this.pollTimer = undefined;
  }

  /** Ask `contenox/status` and update the status bar (and the context view if KV changed). */
  async pollStatus(): Promise<StatusResult | undefined> {
    const client = this.client;
    if (!client || !client.isRunning() || this.polling) return this.status;
    this.polling = true;
    try {
      const s = await client.sendRequest<StatusResult>(Methods.status, {});
      const prev = this.status;
      this.status = s;
      this.updateStatusBar();
      const changed = !prev || prev.state !== s.state || prev.residentTokens !== s.residentTokens ||
        prev.pendingPrefillTokens !== s.pendingPrefillTokens;
      if (changed && this.treeView.visible) this.scheduleRefresh(0);
      return s;
    } catch {
      return this.status; // the state listener reports a dead server
    } finally {
      this.polling = false;
    }
  }

  updateStatusBar(): void {
    const view = statusBarView(this.status, this.isRunning());
    this.statusItem.text = view.text;
    this.statusItem.tooltip = this.startError && !this.isRunning() ? this.startError : view.tooltip;
    this.statusItem.backgroundColor = view.isError
      ? new this.vs.ThemeColor('statusBarItem.errorBackground')
      : undefined;
  }

  async showStatus(): Promise<StatusResult | undefined> {
    const client = this.requireClient();
    if (!client) return undefined;
    let status: StatusResult;
    let pins: ListPinsResult | undefined;
    try {
      [status, pins] = await Promise.all([
        client.sendRequest<StatusResult>(Methods.status, {}),
        client.sendRequest<ListPinsResult>(Methods.listPins, {}).catch(() => undefined),
      ]);
    } catch (err) {
      this.showRequestError('status', describeError(err));
      return undefined;
    }
    this.status = status;
    this.updateStatusBar();
    const vs = this.vs;
    type Item = vscode.QuickPickItem & { run?: string };
    const items: Item[] = statusLines(status, pins?.pins).map((l) => ({ label: l.label, description: l.value }));
    items.push(
      { label: 'Actions', kind: vs.QuickPickItemKind.Separator },
      { label: '$(list-tree) Explain Context', run: COMMANDS.explainContext },
      { label: '$(output) Show Log', run: COMMANDS.showLog },
      { label: '$(debug-restart) Restart Server', run: COMMANDS.restartServer },
    );
    void vs.window.showQuickPick(items, { title: 'Contenox status', matchOnDescription: true }).then((picked) => {
      if (picked?.run) void vs.commands.executeCommand(picked.run);
    });
    return status;
  }

  // -- explain context -----------------------------------------------------------------------

  private isSynced(doc: vscode.TextDocument): boolean {
    return doc.uri.scheme === 'file' && LANGUAGES.includes(doc.languageId);
  }

  private editorDocument(): vscode.TextEditor | undefined {
    const editor = this.vs.window.activeTextEditor;
    return editor && editor.document.uri.scheme === 'file' ? editor : undefined;
  }

  /** "Contenox: Explain Context": show the view and fill it. */
  async explainContext(): Promise<ExplainResult | undefined> {
    if (!this.requireClient()) return undefined;
    try {
      await this.vs.commands.executeCommand(`${CONTEXT_VIEW}.focus`);
    } catch {
      // the view container may be hidden; the request still runs
    }
    return this.refreshContext(true);
  }

  private scheduleRefresh(delayMs: number): void {
    if (!this.treeView.visible || !this.isRunning() || this.disposed) return;
    if (this.refreshTimer) clearTimeout(this.refreshTimer);
    this.refreshTimer = setTimeout(() => {
      this.refreshTimer = undefined;
      void this.refreshContext(false);
    }, delayMs);
  }

  /** Ask `contenox/explainContext` for the active editor and show the segment table. */
  async refreshContext(reportErrors: boolean): Promise<ExplainResult | undefined> {
    const client = this.client;
    if (!client || !client.isRunning()) return undefined;
    const seq = ++this.explainSeq;
    const params: ExplainParams = { conversationId: this.conversationId };
    const editor = this.editorDocument();
    if (editor) {
      params.textDocument = { uri: editor.document.uri.toString() };
      params.position = { line: editor.selection.active.line, character: editor.selection.active.character };
    }
    try {
      const result = await client.sendRequest<ExplainResult>(Methods.explainContext, params);
      if (seq !== this.explainSeq) return result; // a newer refresh is on its way
      const view = this.tree.setResult(result);
      this.treeView.message = undefined;
      this.treeView.description = view.summary;
      this.output.appendLine(`[contenox] explain context\n${explainTable(result)}`);
      return result;
    } catch (err) {
      const d = describeError(err);
      if (seq === this.explainSeq) {
        this.tree.setError(d.message);
        this.treeView.description = undefined;
      }
      if (reportErrors && !d.cancelled) this.showRequestError('Explain Context', d);
      return undefined;
    }
  }

  // -- ask -----------------------------------------------------------------------------------

  /** "Contenox: Ask About Test Output (Clipboard)": the clipboard (a failing test's output,
   * copied from the terminal) goes along with the question as a test output. */
  async askWithTestOutput(): Promise<AskResult | undefined> {
    const text = await this.vs.env.clipboard.readText();
    if (!text.trim()) {
      void this.vs.window.showWarningMessage(
        "Contenox: the clipboard is empty: copy the failing test's output first.");
      return undefined;
    }
    return this.ask({ outputs: [{ kind: 'test', source: 'clipboard', text }] });
  }

  /** "Contenox: Ask": question → streamed answer in the conversation panel; every ask
   * continues the current conversation (its earlier turns are part of the prompt). */
  async ask(arg?: string | AskOptions): Promise<AskResult | undefined> {
    const vs = this.vs;
    const client = this.requireClient();
    if (!client) return undefined;
    const opts: AskOptions = typeof arg === 'string' ? { question: arg } : arg ?? {};
    const editor = this.editorDocument();
    let question = opts.question;
    if (!question) {
      question = await vs.window.showInputBox({
        title: 'Contenox: Ask',
        prompt: editor && !editor.selection.isEmpty ? 'Ask about the selection' : 'Ask about this code',
        placeHolder: 'What does this function do?',
        ignoreFocusOut: true,
      });
    }
    if (!question || !question.trim()) return undefined;

    const conversationId = this.conversationId;
    const partialToken = `contenox-ask-${Date.now()}-${++this.askSeq}`;
    const params: AskParams = { question, conversationId, partialResultToken: partialToken };
    if (editor) {
      this.lastTarget = {
        textDocument: { uri: editor.document.uri.toString() },
        range: toRange(editor.selection),
      };
    }
    if (this.lastTarget) {
      params.textDocument = this.lastTarget.textDocument;
      params.range = this.lastTarget.range;
    }
    if (opts.maxTokens) params.maxTokens = opts.maxTokens;
    if (opts.outputs?.length) params.outputs = opts.outputs;

    this.cancelAsk();
    const cts = new vs.CancellationTokenSource();
    this.askCts = cts;
    let text = '';
    const q = question;
    const seq = ++this.panelAsk;
    const shown = () => this.panelAsk === seq;
    void this.answer.open(q, this.history);
    const sub = client.onProgress(partialToken, (value) => {
      const piece = (value as AskPartial | undefined)?.text;
      if (typeof piece === 'string') {
        text += piece;
        if (shown()) void this.answer.update(q, text, 'streaming');
      }
    });
    try {
      const result = await vs.window.withProgress(
        { location: vs.ProgressLocation.Notification, title: 'Contenox: asking', cancellable: true },
        async (_progress, progressToken) => {
          progressToken.onCancellationRequested(() => cts.cancel());
          return client.sendRequest<AskResult>(Methods.ask, params, cts.token);
        },
      );
      // The server appended the finished answer to the conversation; so does the history
      // (unless a new conversation was started meanwhile).
      if (this.conversationId === conversationId) {
        this.history.push({ question: q, answer: result.text, metrics: result.metrics, turn: result.turn });
      }
      if (shown()) await this.answer.update(q, result.text, 'done', result.metrics);
      return result;
    } catch (err) {
      const d = describeError(err);
      if (d.cancelled || cts.token.isCancellationRequested) {
        if (shown()) await this.answer.update(q, text, 'cancelled');
        return undefined;
      }
      if (shown()) await this.answer.update(q, text, 'error', undefined, d.message);
      this.showRequestError('Ask', d);
      return undefined;
    } finally {
      sub.dispose();
      if (this.askCts === cts) this.askCts = undefined;
      cts.dispose();
      void this.pollStatus();
    }
  }

  /** "Contenox: New Conversation": a fresh conversation id, no history, an empty panel. A
   * running ask is cancelled (a cancelled answer joins no conversation). The server keeps the
   * old conversation (contenox/conversation can list or clear it). */
  newConversation(): string {
    this.cancelAsk();
    this.panelAsk++;
    this.conversationId = newConversationId();
    this.history = [];
    this.lastTarget = undefined;
    void this.answer.reset();
    this.scheduleRefresh(0);
    return this.conversationId;
  }

  /** Cancel the running ask ($/cancelRequest through the client). */
  cancelAsk(): boolean {
    if (!this.askCts) return false;
    this.askCts.cancel();
    return true;
  }

  // -- pins ----------------------------------------------------------------------------------

  private pinTarget(uri?: vscode.Uri): { uri: string; range?: Range } | undefined {
    const editor = this.editorDocument();
    const target = uri ?? editor?.document.uri;
    if (!target) return undefined;
    const out: { uri: string; range?: Range } = { uri: target.toString() };
    if (editor && editor.document.uri.toString() === out.uri && !editor.selection.isEmpty) {
      out.range = toRange(editor.selection);
    }
    return out;
  }

  async pinFile(uri?: vscode.Uri): Promise<PinResult | undefined> {
    const client = this.requireClient();
    if (!client) return undefined;
    const target = this.pinTarget(uri);
    if (!target) {
      void this.vs.window.showWarningMessage('Contenox: open a file (or pick one in the Explorer) to pin it.');
      return undefined;
    }
    try {
      const r = await client.sendRequest<PinResult>(Methods.pin, target);
      const tokens = r.pin.tokens !== null && r.pin.tokens !== undefined ? ` (${r.pin.tokens} tokens)` : '';
      void this.vs.window.showInformationMessage(
        r.pinned ? `Contenox: pinned ${r.pin.label}${tokens}.` : `Contenox: ${r.pin.label} is already pinned.`,
      );
      this.scheduleRefresh(0);
      return r;
    } catch (err) {
      this.showRequestError('Pin', describeError(err));
      return undefined;
    }
  }

  async unpinFile(uri?: vscode.Uri): Promise<UnpinResult | undefined> {
    const client = this.requireClient();
    if (!client) return undefined;
    const target = this.pinTarget(uri);
    if (!target) {
      void this.vs.window.showWarningMessage('Contenox: open a file (or pick one in the Explorer) to unpin it.');
      return undefined;
    }
    try {
      const r = await client.sendRequest<UnpinResult>(Methods.unpin, { uri: target.uri });
      void this.vs.window.showInformationMessage(
        r.removed ? `Contenox: removed ${r.removed} pin${r.removed === 1 ? '' : 's'}.` : 'Contenox: that file was not pinned.',
      );
      this.scheduleRefresh(0);
      return r;
    } catch (err) {
      this.showRequestError('Unpin', describeError(err));
      return undefined;
    }
  }

  dispose(): void {
    this.disposed = true;
    this.stopPolling();
    if (this.refreshTimer) clearTimeout(this.refreshTimer);
    this.cancelAsk();
    this.answer.dispose();
    this.disposables.forEach((d) => d.dispose());
  }
}

function toRange(sel: vscode.Selection | vscode.Range): Range {
  return {
    start: { line: sel.start.line, character: sel.start.character },
    end: { line: sel.end.line, character: sel.end.character },
  };
}

/** Activation with injected dependencies; returns the controller (also the extension's API). */
export async function activateWith(
  deps: Deps,
  context: { subscriptions: { dispose(): unknown }[]; extensionUri?: vscode.Uri },
): Promise<Contenox> {
  const contenox = new Contenox({ ...deps, extensionUri: deps.extensionUri ?? context.extensionUri });
  context.subscriptions.push({ dispose: () => { void contenox.stop(); contenox.dispose(); } });
  await contenox.start();
  return contenox;
}
