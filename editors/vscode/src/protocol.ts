/**
 * The Contenox server's public request contract (contenox_lsp/PROTOCOL.md), as TypeScript
 * types. Nothing here computes anything the server computes: the editor only shows it.
 */

export const Methods = {
  explainContext: 'contenox/explainContext',
  ask: 'contenox/ask',
  pin: 'contenox/pin',
  unpin: 'contenox/unpin',
  listPins: 'contenox/listPins',
  status: 'contenox/status',
  snapshot: 'contenox/snapshot',
  document: 'contenox/document',
  conversation: 'contenox/conversation',
  nextEdit: 'contenox/nextEdit',
} as const;

/** Commands the server executes (workspace/executeCommand). The language client registers
 * them in VS Code itself, so the extension's own command ids must never reuse them. */
export const SERVER_COMMANDS = [
  'contenox.explain',
  'contenox.fix',
  'contenox.docstring',
  'contenox.pin',
  'contenox.unpin',
  'contenox.acceptCompletion',
  'contenox.acceptNextEdit',
  'contenox.rejectNextEdit',
] as const;

/** JSON-RPC RequestCancelled. */
export const REQUEST_CANCELLED = -32800;

export interface Position {
  line: number;
  character: number;
}
export interface Range {
  start: Position;
  end: Position;
}
export interface TextDocumentIdentifier {
  uri: string;
}

/** contenox/nextEdit params (Copilot's textDocument/copilotInlineEdit shape). */
export interface NextEditParams {
  textDocument: { uri: string; version: number };
  position: Position;
  context?: { triggerKind: number };
}
export interface Command {
  title: string;
  command: string;
  arguments?: unknown[];
}
/** One suggested edit: replace `range` of the document (at `version`) with `text`. */
export interface NextEditItem {
  text: string;
  textDocument: { uri: string; version?: number };
  range: Range;
  command?: Command;
}
export interface NextEditResult {
  edits: NextEditItem[];
}
/** Copilot's notification that an inline edit was shown. */
export const DID_SHOW_INLINE_EDIT = 'textDocument/didShowInlineEdit';

export interface Segment {
  kind: string;
  label: string;
  tokens: number;
  tokenStart: number;
  tokenEnd: number;
  status: 'cached' | 'new' | string;
  cacheClass: string;
  invalidation: string;
  byteHash: string;
  tokenHash: string;
  truncated?: boolean;
  text?: string;
}

export interface DroppedSegment {
  kind: string;
  label: string;
  cacheClass: string;
  tokens: number;
  status: string;
}

/** Output sent with a request (segment H): a test run's, a terminal's, diagnostics. The
 * definitions its traceback runs through inside the workspace lead the question's code. */
export interface RequestOutput {
  kind: "test" | "terminal" | "diagnostics";
  /** Where it came from, as the segment's label shows it ("pytest"); default "request". */
  source?: string;
  /** At most 200,000 characters. */
  text: string;
}

export interface ExplainParams {
  textDocument?: TextDocumentIdentifier;
  position?: Position;
  question?: string;
  includeText?: boolean;
  /** Show this conversation's earlier turns among the segments (see AskParams). */
  conversationId?: string;
  /** At most 8 (see AskParams). */
  outputs?: RequestOutput[];
}

export interface Capabilities {
  snapshots: boolean;
  branches: boolean;
  cancel: boolean;
  prefix_reuse: boolean;
}

export interface ExplainResult {
  profileId: string;
  backend: string;
  nCtx: number;
  totalTokens: number;
  reusedTokens: number;
  newTokens: number;
  residentTokens: number;
  pendingPrefillTokens: number;
  userStart?: number;
  stableEnd?: number;
  cachedFrom?: 'resident' | 'snapshot' | 'none' | string;
  missReason?: string | null;
  estimatedPrefillMs?: number | null;
  reuseGranularity?: number;
  capabilities?: Capabilities;
  branches?: Record<string, number>;
  promptFormat?: 'base' | 'gemma' | 'chatml' | 'llama3' | 'raw' | string;
  /** `profile`, `template`, `family (...)`, `base: no template`, `base: template not usable (...)`. */
  promptFormatSource?: string | null;
  completionMode?: 'prefix' | 'fim' | string;
  completionLayout?: 'plain' | 'repository' | string;
  /** What bounds the code the question finds (`source` "cli": not bounded). */
  questionCodeBound?: QuestionCodeBound;
  /** The one budget of the context beside the question (`contextTokens`) and what this prompt used. */
  budget?: ContextBudget;
  /** The repo index: `building` → this prompt has no repo map and no code segments yet. */
  index?: {
    state: 'building' | 'ready' | 'error' | 'idle' | string;
    files: number | null;
    /** The code-search index: files in it, files not yet (`pending` > 0: filling after a build). */
    codeSearch?: { files: number; pending: number } | null;
  };
  segments: Segment[];
  dropped?: DroppedSegment[];
}

export interface ContextBudget {
  contextTokens: number;
  mapTokens: number;
  mapShare: number;
  codeCursorShare: number;
  codeTokensCap: number | null;
  besideQuestion: number | null;
}

export interface QuestionCodeBound {
  tokens: number | null;
  questionCodeMs: number;
  tokensPerS: number | null;
  source: 'measured' | 'remembered' | 'none' | 'cli' | string;
}

/** How warm == cold is kept (llama backend; `engine/README.md`). */
export interface ExactReuse {
  kind: 'invariant' | 'chunked' | 'off' | 'inexact' | string;
  chunk: number;
  minBatch: number;
  description: string;
}

export interface AskMetrics {
  promptTokens?: number;
  reusedTokens?: number;
  newTokens?: number;
  restoredFromSnapshot?: number;
  stableTokens?: number;
  stableSnapshotSaved?: boolean;
  assemblyMs?: number;
  prefillMs?: number;
  ttftMs?: number;
  engineTtftMs?: number;
  decodeTokens?: number;
  decodeTokensPerSecond?: number;
  finishReason?: string | null;
  missReason?: string | null;
}

export interface AskParams {
  question: string;
  textDocument?: TextDocumentIdentifier;
  range?: Range;
  maxTokens?: number;
  /** 1–200 characters, chosen by the client: the conversation's earlier turns are part of the
   * prompt, and a finished answer is appended to it. */
  conversationId?: string;
  /** At most 8: each is a segment H of its own, after the conversation's earlier turns. */
  outputs?: RequestOutput[];
  partialResultToken?: string | number;
  workDoneToken?: string | number;
}

export interface AskResult {
  text: string;
  metrics: AskMetrics;
  /** With a `conversationId` in the params: that id, and the number of this turn in it. */
  conversationId?: string;
  turn?: number;
}

/** The `value` of a `$/progress` notification carrying an ask's partial result. */
export interface AskPartial {
  text: string;
}

export interface PinInfo {
  uri: string;
  range: Range | null;
  label: string;
  tokens: number | null;
}

export interface PinResult {
  pinned: boolean;
  pin: PinInfo;
}

export interface UnpinResult {
  removed: number;
}

export interface ListPinsResult {
  pins: PinInfo[];
}

/** `contenox/conversation` params. */
export interface ConversationParams {
  action: 'list' | 'clear';
  conversationId?: string;
}

/** One conversation in `contenox/conversation` `list` without an id. */
export interface ConversationSummary {
  conversationId: string;
  turns: number;
  /** Seconds since the epoch of the last appended turn. */
  updated: number;
  lastQuestion: string | null;
}

/** `list` without an id: every conversation, newest first. */
export interface ConversationListResult {
  active: string | null;
  conversations: ConversationSummary[];
}

export interface ConversationTurnInfo {
  question: string;
  answer: string;
}

/** `list` with an id: that conversation's turns, oldest first (empty when unknown). */
export interface ConversationTurnsResult {
  conversationId: string;
  turns: ConversationTurnInfo[];
}

/** `clear`: how many conversations were removed. */
export interface ConversationClearResult {
  removed: number;
}

export type ServerState = 'cold' | 'warming' | 'warm' | 'busy' | 'error';

export interface StatusResult {
  state: ServerState | string;
  model: string | null;
  backend: string | null;
  profileId: string | null;
  capabilities?: Capabilities | null;
  exactReuse?: ExactReuse | null;
  residentTokens: number;
  pendingPrefillTokens: number;
  targetTokens?: number | null;
  lastInvalidated?: string[];
  contextStale?: boolean;
  lastRequest?: AskMetrics | null;
  running?: string | null;
  prefillOnIdle?: boolean;
  debounceMs?: number;
  error?: string | null;
  index?: { state: string; files: number; error?: string | null };
  completion?: CompletionStatus;
}

/** `contenox/status`'s `completion` (PROTOCOL.md, "Inline completion"). */
export interface CompletionStatus {
  requests: number;
  shown: number;
  accepted: number;
  partiallyAccepted: number;
  typedThrough: number;
  skippedBusy: number;
  lastLatencyMs: number | null;
  lastNewTokens: number | null;
  lastReusedTokens: number | null;
  lastPromptTokens: number | null;
  lastContextTokens: number | null;
  lastDecodeTokens: number | null;
  /** Workspace-relative paths of the files the last prompt's repository part showed. */
  lastContextFiles?: string[] | null;
  mode: string | null;
  /** `repository`: FIM in the model's repository layout; `plain` otherwise. */
  layout?: 'plain' | 'repository' | string | null;
  fim: boolean;
  residentBranches: Record<string, number>;
}
