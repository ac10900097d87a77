/** Pure presentation of server results (no `vscode` import; unit-tested in plain Node). */
import type { AskMetrics, ExplainResult, PinInfo, StatusResult } from './protocol';

export function formatCount(n: number | null | undefined): string {
  if (n === null || n === undefined || Number.isNaN(n)) return '–';
  return Math.round(n).toLocaleString('en-US');
}

export function formatMs(ms: number | null | undefined): string {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return '–';
  if (ms >= 10_000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms >= 1000) return `${(ms / 1000).toFixed(2)} s`;
  return `${Math.round(ms)} ms`;
}

/** A short model name from the server's model description (usually a GGUF path). */
export function shortModel(model: string | null | undefined): string | undefined {
  if (!model) return undefined;
  const base = model.split(/[\\/]/).pop() ?? model;
  const name = base.replace(/\.gguf$/i, '');
  return name.length > 28 ? `${name.slice(0, 27)}…` : name;
}

// -- explain context -------------------------------------------------------------------------

export interface SegmentRow {
  /** Tree item label: the server's segment label ("system", "repo map", "pinned a.py:1-7"). */
  label: string;
  /** "116 tokens · cached" */
  description: string;
  /** Multi-line details (kind, token span, cache class, invalidation, hashes). */
  tooltip: string;
  /** cached → in KV now; new → must be prefilled; evicted → left out by the budget. */
  status: 'cached' | 'new' | 'evicted';
}

export interface ExplainView {
  /** "725 tokens · 711 cached · 14 new" */
  summary: string;
  /** "resident 711 · pending prefill 0" */
  detail: string;
  rows: SegmentRow[];
}

export function explainView(r: ExplainResult): ExplainView {
  const rows: SegmentRow[] = r.segments.map((s) => ({
    label: s.label || s.kind,
    description: `${formatCount(s.tokens)} tokens · ${s.status}${s.truncated ? ' · truncated' : ''}`,
    tooltip: [
      `${s.label} (${s.kind})`,
      `tokens ${formatCount(s.tokenStart)}–${formatCount(s.tokenEnd)} (${formatCount(s.tokens)})`,
      `status: ${s.status}`,
      `cache class: ${s.cacheClass}`,
      `invalidated by: ${s.invalidation}`,
      `byte hash: ${short(s.byteHash)}  token hash: ${short(s.tokenHash)}`,
    ].join('\n'),
    status: s.status === 'cached' ? 'cached' : 'new',
  }));
  for (const d of r.dropped ?? []) {
    rows.push({
      label: d.label || d.kind,
      description: `${formatCount(d.tokens)} tokens · ${d.status || 'evicted'}`,
      tooltip: `${d.label} (${d.kind}) was left out by the context budget (cache class ${d.cacheClass})`,
      status: 'evicted',
    });
  }
  return {
    summary: `${formatCount(r.totalTokens)} tokens · ${formatCount(r.reusedTokens)} cached · ` +
      `${formatCount(r.newTokens)} new`,
    detail: `resident ${formatCount(r.residentTokens)} · pending prefill ` +
      `${formatCount(r.pendingPrefillTokens)} · ${r.profileId} (${r.backend}, n_ctx ${r.nCtx})`,
    rows,
  };
}

/** The explain table as plain text (the README's explain-context shape). */
export function explainTable(r: ExplainResult): string {
  const view = explainView(r);
  const width = Math.max(8, ...view.rows.map((x) => x.label.length)) + 1;
  const lines = r.segments.map((s) =>
    `${(s.label + ':').padEnd(width + 1)} ${String(s.tokens).padStart(7)} tokens   ${s.status}`);
  for (const d of r.dropped ?? []) {
    lines.push(`${(d.label + ':').padEnd(width + 1)} ${String(d.tokens).padStart(7)} tokens   ${d.status}`);
  }
  lines.push('', view.summary, view.detail);
  return lines.join('\n');
}

function short(hash: string | undefined): string {
  return hash ? hash.slice(0, 12) : '–';
}

// -- status ----------------------------------------------------------------------------------

const STATE_ICONS: Record<string, string> = {
  cold: '$(circle-large-outline)',
  warming: '$(sync~spin)',
  warm: '$(zap)',
  busy: '$(loading~spin)',
  error: '$(error)',
};

export interface StatusBarView {
  text: string;
  tooltip: string;
  isError: boolean;
}

/** The status-bar item: model, state, resident tokens, pending prefill, last TTFT, last
 * inline completion's latency. */
export function statusBarView(s: StatusResult | undefined, running: boolean): StatusBarView {
  if (!running) {
    return {
      text: '$(circle-slash) Contenox: off',
      tooltip: 'The Contenox language server is not running. Click for details.',
      isError: true,
    };
  }
  if (!s) {
    return { text: '$(loading~spin) Contenox', tooltip: 'Contenox: starting…', isError: false };
  }
  const parts = [`${STATE_ICONS[s.state] ?? '$(question)'} ${shortModel(s.model) ?? 'Contenox'}`, s.state];
  parts.push(`${formatCount(s.residentTokens)} tok`);
  if (s.pendingPrefillTokens > 0) parts.push(`+${formatCount(s.pendingPrefillTokens)} pending`);
  const ttft = s.lastRequest?.ttftMs;
  if (ttft !== undefined && ttft !== null) parts.push(`TTFT ${formatMs(ttft)}`);
  const completion = s.completion?.lastLatencyMs;
  if (completion !== undefined && completion !== null) parts.push(`$(sparkle) ${formatMs(completion)}`);
  return {
    text: parts.join(' · '),
    tooltip: statusLines(s).map((l) => `${l.label}: ${l.value}`).join('\n') +
      '\n\nClick for Contenox status.',
    isError: s.state === 'error',
  };
}

export interface StatusLine {
  label: string;
  value: string;
}

export function statusLines(s: StatusResult, pins?: PinInfo[]): StatusLine[] {
  const lines: StatusLine[] = [
    { label: 'State', value: s.state + (s.running ? ` (${s.running})` : '') },
    { label: 'Model', value: s.model ?? '(not loaded yet)' },
    { label: 'Backend', value: s.backend ?? '–' },
    { label: 'Profile', value: s.profileId ?? '–' },
    { label: 'Resident tokens', value: formatCount(s.residentTokens) },
    { label: 'Pending prefill', value: `${formatCount(s.pendingPrefillTokens)} tokens` },
  ];
  if (s.lastRequest) lines.push({ label: 'Last request', value: metricsLine(s.lastRequest) });
  if (s.lastInvalidated && s.lastInvalidated.length) {
    lines.push({ label: 'Last invalidated', value: s.lastInvalidated.join(', ') });
  }
  if (s.index) {
    lines.push({
      label: 'Index',
      value: `${s.index.state}, ${formatCount(s.index.files)} files${s.index.error ? ` (${s.index.error})` : ''}`,
    });
  }
  if (s.prefillOnIdle !== undefined) {
    lines.push({
      label: 'Idle pre-prefill',
      value: `${s.prefillOnIdle ? 'on' : 'off'}${s.debounceMs !== undefined ? `, debounce ${s.debounceMs} ms` : ''}`,
    });
  }
  if (pins) {
    lines.push({
      label: 'Pins',
      value: pins.length ? pins.map((p) => `${p.label}${p.tokens !== null ? ` (${p.tokens} tok)` : ''}`).join(', ') : 'none',
    });
  }
  if (s.error) lines.push({ label: 'Error', value: s.error });
  return lines;
}

export function metricsLine(m: AskMetrics): string {
  const parts: string[] = [];
  if (m.ttftMs !== undefined) parts.push(`TTFT ${formatMs(m.ttftMs)}`);
  if (m.reusedTokens !== undefined) parts.push(`reused ${formatCount(m.reusedTokens)}`);
  if (m.newTokens !== undefined) parts.push(`new ${formatCount(m.newTokens)}`);
  if (m.prefillMs !== undefined) parts.push(`prefill ${formatMs(m.prefillMs)}`);
  if (m.decodeTokens !== undefined) parts.push(`${formatCount(m.decodeTokens)} tokens`);
  if (m.decodeTokensPerSecond !== undefined) parts.push(`${m.decodeTokensPerSecond.toFixed(1)} tok/s`);
  return parts.join(' · ') || '–';
}

// -- ask -------------------------------------------------------------------------------------

export type AskState = 'waiting' | 'streaming' | 'done' | 'cancelled' | 'error';

/** A finished turn of the conversation the answer panel shows (kept by the controller). */
export interface ConversationTurn {
  question: string;
  answer: string;
  metrics?: AskMetrics;
  /** The server's number of this turn in its conversation. */
  turn?: number;
}

/**
 * The Markdown of one answer in the answer panel: the answer (the model's Markdown) and a
 * footer with the state or the metrics. The question is not part of it: it is user text and
 * goes into the page escaped (questionHtml), never through the Markdown renderer.
 */
export function askMarkdown(
  text: string,
  state: AskState,
  metrics?: AskMetrics,
  error?: string,
): string {
  const out: string[] = [];
  if (text) out.push(text);
  else if (state === 'waiting' || state === 'streaming') out.push('_Waiting for the first token…_');
  out.push('');
  switch (state) {
    case 'waiting':
    case 'streaming':
      out.push('---', '_Streaming… (Contenox: Cancel Ask to stop)_');
      break;
    case 'done':
      out.push('---', `_${metrics ? metricsLine(metrics) : 'done'}_`);
      break;
    case 'cancelled':
      out.push('---', '_Cancelled._');
      break;
    case 'error':
      out.push('---', `**Error:** ${error ?? 'unknown error'}`);
      break;
  }
  return out.join('\n');
}

/** A question as a quote, HTML-escaped (line breaks kept by the page's `white-space`). */
export function questionHtml(question: string): string {
  return `<blockquote class="question">${escapeHtml(question)}</blockquote>`;
}

export function escapeHtml(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;')
    .replace(/'/g, '&#39;');
}

// -- errors ----------------------------------------------------------------------------------

export interface DescribedError {
  message: string;
  cancelled: boolean;
  code?: string;
}

/** A user-facing one-liner for a request failure (never a stack trace). */
export function describeError(err: unknown): DescribedError {
  const e = err as { code?: unknown; message?: unknown; data?: unknown } | undefined;
  if (e && e.code === -32800) return { message: 'cancelled', cancelled: true };
  let message = typeof e?.message === 'string' ? e.message : String(err);
  message = message.split('\n')[0].trim();
  const data = e?.data as { code?: unknown } | undefined;
  const code = data && typeof data.code === 'string' ? data.code : undefined;
  if (/connection (got )?(closed|disposed)|not running|pending response rejected/i.test(message)) {
    return {
      message: 'the language server is not running (see the Contenox output for its log)',
      cancelled: false,
    };
  }
  return { message: code ? `${message} [${code}]` : message, cancelled: false, code };
}
