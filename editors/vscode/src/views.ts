/** The explain-context tree view and the answer panel, written against an injected `vscode`. */
import type * as vscode from 'vscode';
import { askMarkdown, escapeHtml, explainView, type AskState, type ExplainView } from './format';
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

/**
 * The "Contenox: Ask" answer panel: one webview, reused; the answer streams in as Markdown.
 * Updates are coalesced (at most one render per `throttleMs`).
 */
export class AnswerPanel {
  private panel: vscode.WebviewPanel | undefined;
  private pending: { md: string; final: boolean } | undefined;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private rendering: Promise<void> = Promise.resolve();
  /** The last Markdown shown (for tests and for re-rendering). */
  markdown = '';

  constructor(private readonly vs: VSCodeApi, private readonly throttleMs = 100) {}

  open(question: string): void {
    const vs = this.vs;
    if (!this.panel) {
      this.panel = vs.window.createWebviewPanel(
        'contenox.answer',
        'Contenox: Ask',
        { viewColumn: vs.ViewColumn.Beside, preserveFocus: true },
        { enableScripts: true, localResourceRoots: [], retainContextWhenHidden: true },
      );
      this.panel.onDidDispose(() => {
        this.panel = undefined;
      });
      this.panel.webview.html = this.page('');
    } else {
      this.panel.reveal(undefined, true);
    }
    void this.show(askMarkdown(question, '', 'waiting'), true, false);
  }

  update(question: string, text: string, state: AskState, metrics?: AskMetrics, error?: string): Promise<void> {
    const final = state !== 'streaming' && state !== 'waiting';
    return this.show(askMarkdown(question, text, state, metrics, error), final, final);
  }

  private show(md: string, immediate: boolean, final: boolean): Promise<void> {
    this.markdown = md;
    this.pending = { md, final };
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
    this.rendering = this.rendering.then(async () => {
      const html = await renderMarkdown(this.vs, next.md);
      const panel = this.panel;
      if (!panel) return;
      if (next.final) {
        // The finished answer becomes the page itself (survives reloads of the webview).
        panel.webview.html = this.page(html);
      } else {
        await panel.webview.postMessage({ type: 'render', html });
      }
    }).catch(() => undefined);
    return this.rendering;
  }

  dispose(): void {
    if (this.timer) clearTimeout(this.timer);
    this.panel?.dispose();
    this.panel = undefined;
  }

  get isOpen(): boolean {
    return this.panel !== undefined;
  }

  private page(body: string): string {
    const n = nonce();
    const csp = this.panel?.webview.cspSource ?? '';
    return `<!DOCTYPE html>
<html lang="en"><head><meta charset="UTF-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; img-src ${csp} https: data:; style-src ${csp} 'unsafe-inline'; script-src 'nonce-${n}';">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<style>
body { font-family: var(--vscode-font-family); font-size: var(--vscode-font-size); line-height: 1.5; padding: 0 1em; }
pre, code { font-family: var(--vscode-editor-font-family); }
pre { background: var(--vscode-textCodeBlock-background); padding: .5em; overflow-x: auto; }
blockquote { margin: 0; padding: 0 1em; border-left: 3px solid var(--vscode-textBlockQuote-border); color: var(--vscode-descriptionForeground); }
</style></head>
<body><div id="answer">${body}</div>
<script nonce="${n}">
const el = document.getElementById('answer');
window.addEventListener('message', (event) => {
  const m = event.data;
  if (m && m.type === 'render') {
    const atBottom = window.innerHeight + window.scrollY >= document.body.scrollHeight - 20;
    el.innerHTML = m.html;
    if (atBottom) window.scrollTo(0, document.body.scrollHeight);
  }
});
</script></body></html>`;
  }
}
