/** The explain-context tree view and the answer panel, written against an injected `vscode`. */
import type * as vscode from 'vscode';
import {
  askMarkdown,
  escapeHtml,
  explainView,
  questionHtml,
  type AskState,
  type ConversationTurn,
  type ExplainView,
} from './format';
import type { AskMetrics, ExplainResult } from './protocol';

export type VSCodeApi = typeof vscode;

export interface ContextNode {
  id: string;
  label: string;
  description?: string;
  tooltip?: string;
  icon: 'summary' | 'cached' | 'new' | 'evicted' | 'info' | 'error';
}

/** Tree data for the "Context" view: totals first, then one row per segment in prompt order. */
export class ContextTreeProvider implements vscode.TreeDataProvider<ContextNode> {
  private readonly changed: vscode.EventEmitter<ContextNode | undefined | void>;
  readonly onDidChangeTreeData: vscode.Event<ContextNode | undefined | void>;
  private nodes: ContextNode[] = [];
  last: ExplainResult | undefined;
  lastView: ExplainView | undefined;

  constructor(private readonly vs: VSCodeApi) {
    this.changed = new vs.EventEmitter<ContextNode | undefined | void>();
    this.onDidChangeTreeData = this.changed.event;
  }

  setResult(result: ExplainResult): ExplainView {
    const view = explainView(result);
    this.last = result;
    this.lastView = view;
    this.nodes = [
      { id: 'summary', label: 'Total', description: view.summary, tooltip: view.detail, icon: 'summary' },
      ...view.rows.map((row, i) => ({
        id: `seg-${i}`,
        label: row.label,
        description: row.description,
        tooltip: row.tooltip,
        icon: row.status,
      })),
    ];
    this.changed.fire();
    return view;
  }

  setError(message: string): void {
    this.nodes = [{ id: 'error', label: message, icon: 'error' }];
    this.changed.fire();
  }

  getChildren(element?: ContextNode): ContextNode[] {
    return element ? [] : this.nodes;
  }

  getTreeItem(node: ContextNode): vscode.TreeItem {
    const vs = this.vs;
    const item = new vs.TreeItem(node.label, vs.TreeItemCollapsibleState.None);
    item.id = node.id;
    item.description = node.description;
    item.tooltip = node.tooltip;
    const icons: Record<ContextNode['icon'], [string, string | undefined]> = {
      summary: ['symbol-numeric', undefined],
      cached: ['pass-filled', 'testing.iconPassed'],
      new: ['circle-large-outline', 'list.warningForeground'],
      evicted: ['circle-slash', 'disabledForeground'],
      info: ['info', undefined],
      error: ['error', 'errorForeground'],
    };
    const [icon, color] = icons[node.icon];
    item.iconPath = color ? new vs.ThemeIcon(icon, new vs.ThemeColor(color)) : new vs.ThemeIcon(icon);
    return item;
  }
}

/** Renders Markdown to HTML with VS Code's built-in Markdown extension (escaped text if absent). */
export async function renderMarkdown(vs: VSCodeApi, md: string): Promise<string> {
  try {
    const html = await vs.commands.executeCommand<string>('markdown.api.render', md);
    if (typeof html === 'string') return html;
  } catch {
    // fall through
  }
  return `<pre>${escapeHtml(md)}</pre>`;
}

function nonce(): string {
  let s = '';
  const chars = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
  for (let i = 0; i < 32; i++) s += chars.charAt(Math.floor(Math.random() * chars.length));
  return s;
}

/** What the answer panel's page asks the extension to do. */
export interface AnswerPanelHandlers {
  /** The follow-up input: ask `question` in the current conversation. */
  ask(question: string): unknown;
  /** The "New conversation" button. */
  newConversation(): unknown;
}

/** Messages the page posts (`acquireVsCodeApi().postMessage`). */
export type PanelMessage = { type: 'ask'; question: string } | { type: 'new' };

interface CurrentTurn {
  question: string;
  md: string;
}

/**
 * The "Contenox: Conversation" panel: one webview, reused. It shows the conversation's earlier
 * turns (each the quoted question, then the answer), then the current question with its answer
 * streaming in as Markdown, and below them a follow-up input and a "New conversation" button.
 * Streamed updates replace only the current answer and are coalesced (at most one render per
 * `throttleMs`); a new question, a finished answer and a reset re-render the whole page.
 */
export class AnswerPanel {
  private panel: vscode.WebviewPanel | undefined;
  private history: readonly ConversationTurn[] = [];
  private current: CurrentTurn | undefined;
  /** Rendered HTML of finished turns (they do not change). */
  private readonly turnHtml = new WeakMap<ConversationTurn, string>();
  private pending: { full: boolean; scroll: 'bottom' | 'restore' } | undefined;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private rendering: Promise<void> = Promise.resolve();
  /** The Markdown of the current answer last shown (for tests and for re-rendering). */
  markdown = '';

  constructor(
    private readonly vs: VSCodeApi,
    private readonly handlers?: AnswerPanelHandlers,
    private readonly throttleMs = 100,
  ) {}

  private ensurePanel(): void {
    const vs = this.vs;
    if (this.panel) {
      this.panel.reveal(undefined, true);
      return;
    }
    const panel = vs.window.createWebviewPanel(
      'contenox.answer',
      'Contenox: Conversation',
      { viewColumn: vs.ViewColumn.Beside, preserveFocus: true },
      { enableScripts: true, localResourceRoots: [], retainContextWhenHidden: true },
    );
    this.panel = panel;
    const sub = panel.webview.onDidReceiveMessage((m: unknown) => this.onMessage(m));
    panel.onDidDispose(() => {
      sub.dispose();
      if (this.panel === panel) this.panel = undefined;
    });
  }

  /** A message from the page: only the two known shapes are acted on. */
  private onMessage(m: unknown): unknown {
    if (!m || typeof m !== 'object') return undefined;
    const msg = m as { type?: unknown; question?: unknown };
    if (msg.type === 'ask' && typeof msg.question === 'string' && msg.question.trim()) {
      return this.handlers?.ask(msg.question);
    }
    if (msg.type === 'new') return this.handlers?.newConversation();
    return undefined;
  }

  /** A new question: the earlier turns of its conversation, then the question, waiting. */
  open(question: string, history: readonly ConversationTurn[] = []): Promise<void> {
    this.ensurePanel();
    this.history = [...history];
    this.current = { question, md: askMarkdown('', 'waiting') };
    this.markdown = this.current.md;
    return this.show(true, true, 'bottom');
  }

  update(question: string, text: string, state: AskState, metrics?: AskMetrics, error?: string): Promise<void> {
    const final = state !== 'streaming' && state !== 'waiting';
    this.current = { question, md: askMarkdown(text, state, metrics, error) };
    this.markdown = this.current.md;
    return this.show(final, final, 'restore');
  }

  /** A new conversation: no earlier turns, no current question (opens the panel). */
  reset(): Promise<void> {
    this.ensurePanel();
    this.history = [];
    this.current = undefined;
    this.markdown = '';
    return this.show(true, true, 'bottom');
  }

  private show(full: boolean, immediate: boolean, scroll: 'bottom' | 'restore'): Promise<void> {
    this.pending = { full: full || !!this.pending?.full, scroll };
    if (immediate) {
      if (this.timer) clearTimeout(this.timer);
      this.timer = undefined;
      return this.flush();
    }
    if (!this.timer) {
      this.timer = setTimeout(() => {
        this.timer = undefined;
        void this.flush();
      }, this.throttleMs);
    }
    return this.rendering;
  }

  private flush(): Promise<void> {
    const next = this.pending;
    this.pending = undefined;
    if (next === undefined) return this.rendering;
    const history = this.history;
    const current = this.current;
    this.rendering = this.rendering.then(async () => {
      const panel = this.panel;
      if (!panel) return;
      const currentHtml = current
        ? `${questionHtml(current.question)}\n${await renderMarkdown(this.vs, current.md)}`
        : '';
      if (next.full) {
        // The page itself holds the whole conversation (it survives reloads of the webview).
        const historyHtml = await this.renderHistory(history);
        if (this.panel !== panel) return;
        panel.webview.html = this.page(historyHtml, currentHtml, next.scroll);
      } else {
        await panel.webview.postMessage({ type: 'render', html: currentHtml });
      }
    }).catch(() => undefined);
    return this.rendering;
  }

  private async renderHistory(turns: readonly ConversationTurn[]): Promise<string> {
    const parts: string[] = [];
    for (const t of turns) {
      let html = this.turnHtml.get(t);
      if (html === undefined) {
        html = `<section class="turn">${questionHtml(t.question)}\n` +
          `${await renderMarkdown(this.vs, askMarkdown(t.answer, 'done', t.metrics))}</section>`;
        this.turnHtml.set(t, html);
      }
      parts.push(html);
    }
    return parts.join('\n');
  }

  dispose(): void {
    if (this.timer) clearTimeout(this.timer);
    this.panel?.dispose();
    this.panel = undefined;
  }

  get isOpen(): boolean {
    return this.panel !== undefined;
  }

  private page(history: string, current: string, scroll: 'bottom' | 'restore'): string {
    const n = nonce();
    const csp = this.panel?.webview.cspSource ?? '';
    const empty = !history && !current
      ? '<p class="empty">A new conversation. Ask below, or with <b>Contenox: Ask</b>; each question builds on the earlier turns.</p>'
      : '';
    return `<!DOCTYPE html>
<html lang="en"><head><meta charset="UTF-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; img-src ${csp} https: data:; style-src ${csp} 'unsafe-inline'; script-src 'nonce-${n}';">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<style>
body { font-family: var(--vscode-font-family); font-size: var(--vscode-font-size); line-height: 1.5; padding: 0 1em; margin: 0; }
pre, code { font-family: var(--vscode-editor-font-family); }
pre { background: var(--vscode-textCodeBlock-background); padding: .5em; overflow-x: auto; }
blockquote { margin: 0; padding: 0 1em; border-left: 3px solid var(--vscode-textBlockQuote-border); color: var(--vscode-descriptionForeground); }
blockquote.question { margin-top: 1em; white-space: pre-wrap; overflow-wrap: anywhere; }
.turn { border-bottom: 1px solid var(--vscode-panel-border, rgba(128, 128, 128, .35)); padding-bottom: .5em; }
.empty { color: var(--vscode-descriptionForeground); }
#followup { position: sticky; bottom: 0; background: var(--vscode-editor-background); padding: .75em 0 1em; margin-top: 1em; border-top: 1px solid var(--vscode-panel-border, rgba(128, 128, 128, .35)); }
#question { display: block; width: 100%; box-sizing: border-box; resize: vertical; min-height: 3.5em; padding: 4px 6px; font-family: var(--vscode-font-family); font-size: var(--vscode-font-size); color: var(--vscode-input-foreground); background: var(--vscode-input-background); border: 1px solid var(--vscode-input-border, transparent); }
#question:focus { outline: 1px solid var(--vscode-focusBorder); outline-offset: -1px; }
.buttons { display: flex; gap: .5em; margin-top: .5em; }
button { padding: 4px 12px; border: none; cursor: pointer; font-family: var(--vscode-font-family); color: var(--vscode-button-foreground); background: var(--vscode-button-background); }
button:hover { background: var(--vscode-button-hoverBackground); }
button.secondary { color: var(--vscode-button-secondaryForeground); background: var(--vscode-button-secondaryBackground); }
button.secondary:hover { background: var(--vscode-button-secondaryHoverBackground); }
</style></head>
<body data-scroll="${scroll}"><div id="answer">${empty}<div id="history">${history}</div><div id="current">${current}</div></div>
<div id="followup">
<textarea id="question" rows="3" aria-label="Follow-up question" placeholder="Ask a follow-up (Enter to ask, Shift+Enter for a new line)"></textarea>
<div class="buttons"><button id="ask" type="button">Ask</button><button id="new" type="button" class="secondary">New conversation</button></div>
</div>
<script nonce="${n}">
const vscode = acquireVsCodeApi();
const state = vscode.getState() || {};
const current = document.getElementById('current');
const input = document.getElementById('question');
function save(patch) { Object.assign(state, patch); vscode.setState(state); }
function atBottom() { return window.innerHeight + window.scrollY >= document.body.scrollHeight - 20; }
function toBottom() { window.scrollTo(0, document.body.scrollHeight); }
input.value = state.draft || '';
if (document.body.dataset.scroll === 'bottom' || state.atBottom !== false) toBottom();
else window.scrollTo(0, state.scrollY || 0);
if (state.focused) input.focus();
function ask() {
  const question = input.value.trim();
  if (!question) return;
  vscode.postMessage({ type: 'ask', question });
  input.value = '';
  save({ draft: '' });
}
input.addEventListener('input', () => save({ draft: input.value }));
input.addEventListener('focus', () => save({ focused: true }));
input.addEventListener('blur', () => save({ focused: false }));
input.addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); ask(); }
});
document.getElementById('ask').addEventListener('click', ask);
document.getElementById('new').addEventListener('click', () => vscode.postMessage({ type: 'new' }));
window.addEventListener('scroll', () => save({ scrollY: window.scrollY, atBottom: atBottom() }));
window.addEventListener('message', (event) => {
  const m = event.data;
  if (m && m.type === 'render') {
    const bottom = atBottom();
    current.innerHTML = m.html;
    if (bottom) toBottom();
  }
});
</script></body></html>`;
  }
}
