/**
 * Next-edit suggestions (contenox/nextEdit, PROTOCOL.md). After an edit settles the extension
 * asks the server for the change the developer is likely to make next, often a few lines away.
 * VS Code's inline-edit API is proposed-only and vscode-languageclient has no support for it,
 * so the suggestion is drawn with decorations: the replaced text struck through, the new text
 * as an inline box after it, a gutter marker and an overview-ruler mark. Tab jumps to it, Tab
 * again (on its line) applies it, Esc dismisses it (keybindings in package.json, active while
 * the `contenox.nextEditVisible` context key is set).
 */
import type * as vscode from 'vscode';
import {
  DID_SHOW_INLINE_EDIT,
  Methods,
  REQUEST_CANCELLED,
  type NextEditItem,
  type NextEditParams,
  type NextEditResult,
} from './protocol';
import type { VSCodeApi } from './views';

/** The context key the Tab/Esc keybindings depend on. */
export const VISIBLE_KEY = 'contenox.nextEditVisible';
/** Quiet time after the last change before a request (typing goes on: no request). */
export const DEBOUNCE_MS = 400;
/** Longest first line of inserted text shown inline (the hover has all of it). */
const MAX_INLINE = 80;

/** What the next-edit feature needs from the rest of the extension. */
export interface NextEditHost {
  request<R>(method: string, params: unknown, token?: vscode.CancellationToken): Promise<R> | undefined;
  notify(method: string, params: unknown): void;
  enabled(): boolean;
  /** Documents synced to the server (the others get no requests). */
  isSynced(doc: vscode.TextDocument): boolean;
  log(message: string): void;
  gutterIcon?: vscode.Uri;
}

interface Shown {
  editor: vscode.TextEditor;
  edit: NextEditItem;
  version: number;
}

export class NextEdits implements vscode.Disposable {
  /** The suggestion drawn right now. */
  current: Shown | undefined;
  private readonly removed: vscode.TextEditorDecorationType;
  private readonly inserted: vscode.TextEditorDecorationType;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private cts: vscode.CancellationTokenSource | undefined;
  private readonly subs: vscode.Disposable[] = [];

  constructor(private readonly vs: VSCodeApi, private readonly host: NextEditHost) {
    const color = (id: string) => new vs.ThemeColor(id);
    this.removed = vs.window.createTextEditorDecorationType({
      textDecoration: 'line-through',
      backgroundColor: color('diffEditor.removedTextBackground'),
    });
    this.inserted = vs.window.createTextEditorDecorationType({
      after: {
        backgroundColor: color('diffEditor.insertedTextBackground'),
        border: '1px solid',
        borderColor: color('editorGutter.addedBackground'),
        margin: '0 0 0 0.3em',
      },
      gutterIconPath: host.gutterIcon,
      gutterIconSize: 'contain',
      overviewRulerColor: color('editorGutter.addedBackground'),
      overviewRulerLane: vs.OverviewRulerLane?.Right,
    });
    this.subs.push(
      this.removed,
      this.inserted,
      vs.workspace.onDidChangeTextDocument((e) => {
        if (!e.contentChanges.length) return;
        if (this.current && e.document === this.current.editor.document) this.clear();
        const editor = vs.window.activeTextEditor;
        if (editor && e.document === editor.document && host.isSynced(e.document)) this.schedule();
      }),
      vs.window.onDidChangeActiveTextEditor(() => this.dismiss()),
    );
  }

  /** Ask after DEBOUNCE_MS of quiet (each change restarts the wait). */
  schedule(delayMs = DEBOUNCE_MS): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    if (!this.host.enabled()) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.request();
    }, delayMs);
  }

  /** Ask for the next edit at the active editor's cursor; draws what comes back. Cancels the
   * previous request; an answer for an older document version is dropped. */
  async request(): Promise<NextEditItem | undefined> {
    const editor = this.vs.window.activeTextEditor;
    if (!editor || !this.host.enabled() || !this.host.isSynced(editor.document)) return undefined;
    this.cts?.cancel();
    const cts = (this.cts = new this.vs.CancellationTokenSource());
    const doc = editor.document;
    const version = doc.version;
    const at = editor.selection.active;
    const params: NextEditParams = {
      textDocument: { uri: doc.uri.toString(), version },
      position: { line: at.line, character: at.character },
      context: { triggerKind: 2 },
    };
    let result: NextEditResult | undefined;
    try {
      result = await this.host.request<NextEditResult>(Methods.nextEdit, params, cts.token);
    } catch (err) {
      const code = (err as { code?: number }).code;
      if (code !== REQUEST_CANCELLED) this.host.log(`[contenox] next edit failed: ${String(err)}`);
      return undefined;
    } finally {
      if (this.cts === cts) this.cts = undefined;
    }
    const edit = result?.edits?.[0];
    if (!edit || cts.token.isCancellationRequested || doc.version !== version) return undefined;
    if (this.vs.window.activeTextEditor !== editor) return undefined;
    this.show(editor, edit, version);
    return edit;
  }

  /** Draw `edit` in `editor` (made for the document's `version`). */
  show(editor: vscode.TextEditor, edit: NextEditItem, version: number): void {
    this.clear();
    const vs = this.vs;
    const r = edit.range;
    const range = new vs.Range(r.start.line, r.start.character, r.end.line, r.end.character);
    const lines = edit.text.split('\n');
    let shown = lines[0] || (lines.length > 1 ? '↵' : '');
    if (shown.length > MAX_INLINE) shown = `${shown.slice(0, MAX_INLINE)}…`;
    if (lines.length > 1) shown += ` (+${lines.length - 1} lines)`;
    const hover = new vs.MarkdownString();
    hover.appendMarkdown('**Contenox: next edit** — Tab jumps, Tab again applies, Esc dismisses\n\n');
    hover.appendCodeblock(edit.text || '(delete)', editor.document.languageId);
    editor.setDecorations(this.removed, range.isEmpty ? [] : [{ range, hoverMessage: hover }]);
    editor.setDecorations(this.inserted, [{
      range: new vs.Range(range.end, range.end),
      hoverMessage: hover,
      renderOptions: { after: { contentText: shown || ' ' } },
    }]);
    this.current = { editor, edit, version };
    void vs.commands.executeCommand('setContext', VISIBLE_KEY, true);
    this.host.notify(DID_SHOW_INLINE_EDIT, { item: edit });
  }

  /** Tab: move to the suggestion, or apply it when the cursor is already on its first line.
   * False when nothing is shown. */
  async tab(): Promise<boolean> {
    const cur = this.current;
    if (!cur || this.vs.window.activeTextEditor !== cur.editor) return false;
    const start = cur.edit.range.start;
    if (cur.editor.selection.active.line !== start.line) {
      const pos = new this.vs.Position(start.line, start.character);
      cur.editor.selection = new this.vs.Selection(pos, pos);
      cur.editor.revealRange(new this.vs.Range(pos, pos));
      return true;
    }
    return this.accept();
  }

  /** Apply the suggestion and tell the server (its accept command). */
  async accept(): Promise<boolean> {
    const cur = this.current;
    if (!cur) return false;
    this.clear();
    if (cur.editor.document.version !== cur.version) return false; // changed meanwhile
    const r = cur.edit.range;
    const range = new this.vs.Range(r.start.line, r.start.character, r.end.line, r.end.character);
    const applied = await cur.editor.edit((b) => b.replace(range, cur.edit.text));
    if (applied && cur.edit.command) this.runServerCommand(cur.edit.command.command, cur.edit.command.arguments);
    return applied;
  }

  /** Esc (or leaving the editor): hide it and tell the server it was not taken. */
  dismiss(): boolean {
    const cur = this.current;
    this.cts?.cancel();
    this.clear();
    if (!cur) return false;
    const args = cur.edit.command?.arguments;
    if (args) this.runServerCommand('contenox.rejectNextEdit', args);
    return true;
  }

  private runServerCommand(command: string, args: unknown[] | undefined): void {
    const sent = this.host.request('workspace/executeCommand', { command, arguments: args ?? [] });
    sent?.then(undefined, (err: unknown) => this.host.log(`[contenox] ${command} failed: ${String(err)}`));
  }

  private clear(): void {
    const cur = this.current;
    if (!cur) return;
    this.current = undefined;
    cur.editor.setDecorations(this.removed, []);
    cur.editor.setDecorations(this.inserted, []);
    void this.vs.commands.executeCommand('setContext', VISIBLE_KEY, false);
  }

  dispose(): void {
    if (this.timer) clearTimeout(this.timer);
    this.cts?.cancel();
    this.clear();
    this.subs.forEach((d) => d.dispose());
  }
}
