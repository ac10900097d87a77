/**
 * Small fakes of the `vscode` API surface the extension uses, and of the language client.
 * They record what the extension did so tests can assert on it.
 */
import { EventEmitter as NodeEmitter } from 'node:events';
import type { ClientFactory, ClientHooks, LspClient } from '../src/controller';
import type { LaunchSpec } from '../src/settings';

type Listener<T> = (e: T) => unknown;

export class FakeEventEmitter<T> {
  private listeners: Listener<T>[] = [];
  event = (listener: Listener<T>) => {
    this.listeners.push(listener);
    return { dispose: () => { this.listeners = this.listeners.filter((l) => l !== listener); } };
  };
  fire(e?: T): void {
    for (const l of [...this.listeners]) l(e as T);
  }
  dispose(): void {
    this.listeners = [];
  }
}

export class FakeCancellationTokenSource {
  private emitter = new FakeEventEmitter<void>();
  token = {
    isCancellationRequested: false,
    onCancellationRequested: this.emitter.event,
  };
  cancel(): void {
    if (this.token.isCancellationRequested) return;
    this.token.isCancellationRequested = true;
    this.emitter.fire();
  }
  dispose(): void {}
}

export class FakeUri {
  constructor(readonly scheme: string, readonly fsPath: string) {}
  static file(p: string): FakeUri {
    return new FakeUri('file', p);
  }
  toString(): string {
    return `${this.scheme}://${this.fsPath}`;
  }
}

export class FakePosition {
  constructor(readonly line: number, readonly character: number) {}
}

export class FakeRange {
  readonly start: FakePosition;
  readonly end: FakePosition;
  constructor(a: FakePosition | number, b: FakePosition | number, c?: number, d?: number) {
    this.start = typeof a === 'number' ? new FakePosition(a, b as number) : a;
    this.end = typeof a === 'number' ? new FakePosition(c as number, d as number) : (b as FakePosition);
  }
  get isEmpty(): boolean {
    return this.start.line === this.end.line && this.start.character === this.end.character;
  }
}

export class FakeMarkdownString {
  value = '';
  appendMarkdown(s: string) { this.value += s; return this; }
  appendCodeblock(code: string, lang = '') { this.value += `\n\`\`\`${lang}\n${code}\n\`\`\`\n`; return this; }
}

/** A fake text document: lines of text, a version that counts edits. */
export class FakeDocument {
  version = 1;
  constructor(readonly uri: FakeUri, readonly languageId: string, public lines: string[]) {}
  getText(): string {
    return this.lines.join('\n');
  }
  /** Replace `range` with `text` (what editor.edit and a user edit do). */
  replace(range: FakeRange, text: string): void {
    const all = this.getText();
    const offset = (p: FakePosition) => this.lines.slice(0, p.line).reduce((n, l) => n + l.length + 1, 0) + p.character;
    this.lines = (all.slice(0, offset(range.start)) + text + all.slice(offset(range.end))).split('\n');
    this.version++;
  }
}

export class FakeSelection {
  readonly start: FakePosition;
  readonly end: FakePosition;
  readonly active: FakePosition;
  constructor(anchor: FakePosition, active: FakePosition) {
    const before = anchor.line < active.line || (anchor.line === active.line && anchor.character <= active.character);
    this.start = before ? anchor : active;
    this.end = before ? active : anchor;
    this.active = active;
  }
  get isEmpty(): boolean {
    return this.start.line === this.end.line && this.start.character === this.end.character;
  }
}

export class FakeTreeItem {
  id?: string;
  description?: string;
  tooltip?: string;
  iconPath?: unknown;
  constructor(readonly label: string, readonly collapsibleState: number) {}
}

export class FakeThemeIcon {
  constructor(readonly id: string, readonly color?: unknown) {}
}
export class FakeThemeColor {
  constructor(readonly id: string) {}
}

export interface Message {
  level: 'info' | 'warning' | 'error';
  text: string;
  items: string[];
}

export interface FakeWebviewPanel {
  title: string;
  html: string[];
  posted: { type: string; html: string }[];
  disposed: boolean;
  /** The listeners of `webview.onDidReceiveMessage`. */
  messageListeners: ((message: unknown) => unknown)[];
  /** Simulate the page posting `message` (acquireVsCodeApi().postMessage); resolves when
   * what the listeners returned (e.g. the ask they started) has settled. */
  receive(message: unknown): Promise<unknown[]>;
}

/** A fake `vscode` module. `config` holds `contenox.*` settings (keys without the prefix). */
export function createFakeVscode(opts: { config?: Record<string, unknown>; workspaceFolder?: string } = {}) {
  const config: Record<string, unknown> = { statusRefreshMs: 0, ...(opts.config ?? {}) };
  const commands = new Map<string, (...args: any[]) => unknown>();
  const executed: { id: string; args: unknown[] }[] = [];
  const messages: Message[] = [];
  const inputAnswers: (string | undefined)[] = [];
  const clipboard = { text: '' };
  const quickPicks: { items: any[]; options: any }[] = [];
  const panels: FakeWebviewPanel[] = [];
  const output: string[] = [];
  const statusItem = { text: '', tooltip: '' as unknown, command: '', name: '', backgroundColor: undefined as unknown, shown: false, show() { this.shown = true; }, hide() { this.shown = false; }, dispose() {} };
  const treeVisibility = new FakeEventEmitter<{ visible: boolean }>();
  const treeView = {
    visible: false,
    message: undefined as string | undefined,
    description: undefined as string | undefined,
    provider: undefined as any,
    onDidChangeVisibility: treeVisibility.event,
    dispose() {},
  };
  const docChanges = new FakeEventEmitter<any>();
  const editorChanges = new FakeEventEmitter<any>();
  const configChanges = new FakeEventEmitter<any>();
  const progressRuns: { title: string; cancellable: boolean; cancel: () => void }[] = [];
  const decorationTypes: { options: any; disposed: boolean }[] = [];
  const contextKeys: Record<string, unknown> = {};
  const renderedMarkdown: string[] = [];

  const vscode = {
    EventEmitter: FakeEventEmitter,
    CancellationTokenSource: FakeCancellationTokenSource,
    TreeItem: FakeTreeItem,
    ThemeIcon: FakeThemeIcon,
    ThemeColor: FakeThemeColor,
    Uri: FakeUri,
    Position: FakePosition,
    Range: FakeRange,
    Selection: FakeSelection,
    MarkdownString: FakeMarkdownString,
    OverviewRulerLane: { Left: 1, Center: 2, Right: 4, Full: 7 },
    TreeItemCollapsibleState: { None: 0, Collapsed: 1, Expanded: 2 },
    StatusBarAlignment: { Left: 1, Right: 2 },
    ProgressLocation: { SourceControl: 1, Window: 10, Notification: 15 },
    ViewColumn: { Active: -1, Beside: -2, One: 1 },
    QuickPickItemKind: { Separator: -1, Default: 0 },
    window: {
      activeTextEditor: undefined as any,
      createOutputChannel: (_name: string) => ({
        appendLine: (s: string) => output.push(s),
        append: (s: string) => output.push(s),
        show: () => output.push('<shown>'),
        info: (s: string) => output.push(s),
        dispose() {},
      }),
      createTreeView: (_id: string, o: { treeDataProvider: unknown }) => {
        treeView.provider = o.treeDataProvider;
        return treeView;
      },
      createStatusBarItem: () => statusItem,
      createTextEditorDecorationType: (options: unknown) => {
        const type = { options, disposed: false, dispose() { this.disposed = true; } };
        decorationTypes.push(type);
        return type;
      },
      createWebviewPanel: (_type: string, title: string) => {
        const record: FakeWebviewPanel = {
          title, html: [], posted: [], disposed: false, messageListeners: [],
          receive: (message) => Promise.all([...record.messageListeners].map((l) => l(message))),
        };
        panels.push(record);
        const disposeEmitter = new FakeEventEmitter<void>();
        return {
          webview: {
            cspSource: 'vscode-resource:',
            set html(v: string) { record.html.push(v); },
            get html() { return record.html[record.html.length - 1] ?? ''; },
            postMessage: async (m: { type: string; html: string }) => { record.posted.push(m); return true; },
            onDidReceiveMessage: (listener: (message: unknown) => unknown) => {
              record.messageListeners.push(listener);
              return { dispose: () => { record.messageListeners = record.messageListeners.filter((l) => l !== listener); } };
            },
          },
          reveal() {},
          onDidDispose: disposeEmitter.event,
          dispose() { if (record.disposed) return; record.disposed = true; disposeEmitter.fire(); },
        };
      },
      showInformationMessage: (text: string, ...items: string[]) => { messages.push({ level: 'info', text, items }); return Promise.resolve(undefined); },
      showWarningMessage: (text: string, ...items: string[]) => { messages.push({ level: 'warning', text, items }); return Promise.resolve(undefined); },
      showErrorMessage: (text: string, ...items: string[]) => { messages.push({ level: 'error', text, items }); return Promise.resolve(undefined); },
      showInputBox: async () => inputAnswers.shift(),
      showQuickPick: async (items: any[], options: any) => { quickPicks.push({ items, options }); return undefined; },
      withProgress: async (o: { title: string; cancellable: boolean }, task: (p: unknown, t: unknown) => Promise<unknown>) => {
        const cts = new FakeCancellationTokenSource();
        progressRuns.push({ title: o.title, cancellable: o.cancellable, cancel: () => cts.cancel() });
        return task({ report() {} }, cts.token);
      },
      onDidChangeActiveTextEditor: editorChanges.event,
    },
    env: {
      clipboard: { readText: async () => clipboard.text },
    },
    workspace: {
      workspaceFolders: opts.workspaceFolder ? [{ uri: FakeUri.file(opts.workspaceFolder), name: 'ws', index: 0 }] : undefined,
      getConfiguration: (_section: string) => ({
        get: <T>(key: string, fallback: T): T => (key in config ? (config[key] as T) : fallback),
      }),
      onDidChangeTextDocument: docChanges.event,
      onDidChangeConfiguration: configChanges.event,
    },
    commands: {
      registerCommand: (id: string, fn: (...args: any[]) => unknown) => {
        if (commands.has(id)) throw new Error(`command '${id}' already exists`);
        commands.set(id, fn);
        return { dispose: () => commands.delete(id) };
      },
      executeCommand: async (id: string, ...args: unknown[]) => {
        executed.push({ id, args });
        if (id === 'setContext') {
          contextKeys[String(args[0])] = args[1];
          return undefined;
        }
        if (id === 'markdown.api.render') {
          renderedMarkdown.push(String(args[0]));
          return `<div class="md">${String(args[0])}</div>`;
        }
        const fn = commands.get(id);
        return fn ? fn(...args) : undefined;
      },
    },
  };

  /** Put a file editor in front, with a selection (anchor → active) and, optionally, its
   * text. It records decorations (`decorations.get(type)`) and applies `edit` to the text. */
  function openEditor(path: string, languageId = 'python', anchor: [number, number] = [0, 0], active: [number, number] = anchor, text = '') {
    const decorations = new Map<unknown, any[]>();
    const document = new FakeDocument(FakeUri.file(path), languageId, text.split('\n'));
    const editor = {
      document,
      selection: new FakeSelection(new FakePosition(...anchor), new FakePosition(...active)),
      decorations,
      revealed: [] as FakeRange[],
      setDecorations: (type: unknown, items: any[]) => { decorations.set(type, items); },
      revealRange: (r: FakeRange) => { editor.revealed.push(r); },
      edit: async (fn: (b: { replace(r: FakeRange, t: string): void }) => void) => {
        const edits: [FakeRange, string][] = [];
        fn({ replace: (r, t) => { edits.push([r, t]); } });
        for (const [r, t] of edits) document.replace(r, t);
        docChanges.fire({ document, contentChanges: edits.map(([range, text]) => ({ range, text })) });
        return true;
      },
    };
    vscode.window.activeTextEditor = editor;
    return editor;
  }

  return {
    vscode, config, commands, executed, messages, inputAnswers, clipboard, quickPicks, panels, output,
    statusItem, treeView, treeVisibility, docChanges, editorChanges, configChanges, progressRuns,
    renderedMarkdown, openEditor, decorationTypes, contextKeys,
    run: (id: string, ...args: unknown[]) => {
      const fn = commands.get(id);
      if (!fn) throw new Error(`command ${id} is not registered`);
      return fn(...args) as Promise<any>;
    },
  };
}

export interface SentRequest {
  method: string;
  params: any;
  token?: { isCancellationRequested: boolean; onCancellationRequested: (l: () => void) => unknown };
}

/**
 * A fake language client. `handlers[method]` answers requests (may call `emitProgress`);
 * a handler that throws makes the request fail with that error.
 */
export class FakeClient implements LspClient {
  running = false;
  started = 0;
  stopped = 0;
  startError: Error | undefined;
  lastError: (() => string | undefined) | undefined;
  sent: SentRequest[] = [];
  notified: { method: string; params: any }[] = [];
  handlers: Record<string, (params: any, req: SentRequest) => unknown> = {};
  private progress = new NodeEmitter();
  private state = new FakeEventEmitter<boolean>();
  constructor(readonly spec: LaunchSpec, readonly hooks: ClientHooks) {}

  async start(): Promise<void> {
    this.started++;
    if (this.startError) throw this.startError;
    this.running = true;
    this.state.fire(true);
  }
  async stop(): Promise<void> {
    this.stopped++;
    this.running = false;
    this.state.fire(false);
  }
  isRunning(): boolean {
    return this.running;
  }
  async sendRequest<R>(method: string, params: unknown, token?: any): Promise<R> {
    const req: SentRequest = { method, params, token };
    this.sent.push(req);
    const h = this.handlers[method];
    if (!h) throw Object.assign(new Error(`Unhandled method ${method}`), { code: -32601 });
    return (await h(params, req)) as R;
  }
  async sendNotification(method: string, params: unknown): Promise<void> {
    this.notified.push({ method, params });
  }
  onProgress(token: string | number, handler: (value: unknown) => void) {
    const key = String(token);
    this.progress.on(key, handler);
    return { dispose: () => this.progress.off(key, handler) };
  }
  emitProgress(token: string | number, value: unknown): void {
    this.progress.emit(String(token), value);
  }
  progressListeners(token: string | number): number {
    return this.progress.listenerCount(String(token));
  }
  onDidChangeState(listener: (running: boolean) => void) {
    return this.state.event(listener);
  }
  /** Simulate the server process dying. */
  crash(): void {
    this.running = false;
    this.state.fire(false);
  }
}

export function fakeClientFactory(setup?: (c: FakeClient) => void): { factory: ClientFactory; clients: FakeClient[] } {
  const clients: FakeClient[] = [];
  const factory: ClientFactory = (spec, hooks) => {
    const c = new FakeClient(spec, hooks);
    setup?.(c);
    clients.push(c);
    return c;
  };
  return { factory, clients };
}
