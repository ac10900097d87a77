/**
 * Protocol tests against the real Python server (real model, real files): initialize with a
 * temporary workspace folder, explainContext, ask with streamed partial results, pin/unpin,
 * code actions + executeCommand, cancellation — and the extension's own command handlers
 * (with a fake `vscode`) talking to the real server.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { ProgressType } from 'vscode-languageserver-protocol/node';
import { activateWith, COMMANDS, type Contenox } from '../src/controller';
import { describeError, explainView, statusBarView } from '../src/format';
import {
  Methods,
  SERVER_COMMANDS,
  type AskResult,
  type ConversationClearResult,
  type ConversationListResult,
  type ConversationTurnsResult,
  type ExplainResult,
  type NextEditResult,
  type StatusResult,
} from '../src/protocol';
import { createFakeVscode } from './fakes';
import { fileUri, initialize, makeWorkspace, startServer, withTimeout, type RunningServer } from './server';

const STATES = ['cold', 'warming', 'warm', 'busy'];
/** Small answers: the embedded model decodes ~8 tokens/s on 2 CPU cores. */
const MAX_TOKENS = 6;
const T = 240_000;

describe('real server (contenox-lsp over stdio)', { timeout: 900_000 }, () => {
  let server: RunningServer;
  let ws: string;
  let appUri: string;
  const logFile = path.resolve('out/test/protocol-server.log');

  before(async () => {
    ws = makeWorkspace();
    appUri = fileUri(path.join(ws, 'app.py'));
    server = startServer(logFile);
  });

  after(async () => {
    if (server && server.proc.exitCode === null) server.proc.kill();
    if (ws) fs.rmSync(ws, { recursive: true, force: true });
  });

  const req = <R>(method: string, params: unknown) =>
    withTimeout(server.conn.sendRequest(method, params) as Promise<R>, T, `${method} (server log: ${logFile})`);

  /** Wait until the server's runtime is up (it is set up asynchronously after `initialized`),
   * then make sure app.py is open on the server. */
  async function waitReady(): Promise<void> {
    const deadline = Date.now() + 60_000;
    for (;;) {
      try {
        await req('contenox/explainContext', {});
        break;
      } catch (err: any) {
        if (!/not initialized/.test(String(err?.message)) || Date.now() > deadline) throw err;
        await new Promise((r) => setTimeout(r, 200));
      }
    }
    try {
      await req('contenox/document', { textDocument: { uri: appUri } });
    } catch {
      await server.conn.sendNotification('textDocument/didOpen', {
        textDocument: { uri: appUri, languageId: 'python', version: 1, text: fs.readFileSync(path.join(ws, 'app.py'), 'utf8') },
      });
    }
  }

  test('initialize advertises the contract (commands, code action kinds, sync)', async () => {
    const init = await withTimeout(initialize(server, ws, { maxTokens: MAX_TOKENS, debounceMs: 100 }), 120_000, 'initialize');
    const caps = init.capabilities;
    assert.equal(init.serverInfo?.name, 'contenox-lsp');
    assert.equal(caps.positionEncoding ?? 'utf-16', 'utf-16');
    for (const id of SERVER_COMMANDS) assert.ok(caps.executeCommandProvider.commands.includes(id), id);
    assert.ok(caps.codeActionProvider.codeActionKinds.includes('source.contenox.pin'));
    assert.equal(caps.textDocumentSync.change, 2, 'incremental sync');
    assert.ok(caps.inlineCompletionProvider, 'inline completion (the language client shows it as ghost text)');
    assert.deepEqual(server.messages.filter((m) => m.type <= 2), [], 'no warnings about our initializationOptions');
  });

  test('requests right after initialized are answered; didOpen is not dropped', { timeout: T }, async () => {
    // An editor sends didOpen (and may send requests) right after `initialized`, the way
    // VS Code and Neovim do; the server must track the document and answer.
    await server.conn.sendNotification('textDocument/didOpen', {
      textDocument: { uri: appUri, languageId: 'python', version: 1, text: fs.readFileSync(path.join(ws, 'app.py'), 'utf8') },
    });
    const [explained, doc] = await Promise.allSettled([
      req<ExplainResult>('contenox/explainContext', { textDocument: { uri: appUri } }),
      req<any>('contenox/document', { textDocument: { uri: appUri } }),
    ]);
    await waitReady();
    const problems: string[] = [];
    if (explained.status === 'rejected') problems.push(`explainContext right after initialized: ${explained.reason.message}`);
    if (doc.status === 'rejected') problems.push(`didOpen right after initialized was dropped: ${doc.reason.message}`);
    assert.deepEqual(problems, []);
  });

  test('textDocument/inlineCompletion answers an InlineCompletionList at the cursor', { timeout: T }, async () => {
    await waitReady();
    const lines = fs.readFileSync(path.join(ws, 'app.py'), 'utf8').split('\n');
    const line = 4;
    const r = await req<any>('textDocument/inlineCompletion', {
      textDocument: { uri: appUri }, position: { line, character: lines[line].length },
      context: { triggerKind: 2 },
    });
    assert.ok(Array.isArray(r.items));
    for (const item of r.items) {
      assert.equal(typeof item.insertText, 'string');
      assert.ok(item.insertText.trim().length > 0, 'never whitespace only');
      assert.equal(item.command.command, 'contenox.acceptCompletion');
    }
  });

  test('contenox/nextEdit after an edit answers the edits list; a stale version gets none', { timeout: T }, async () => {
    await waitReady();
    const text = fs.readFileSync(path.join(ws, 'app.py'), 'utf8');
    const change = (version: number, body: string) => server.conn.sendNotification('textDocument/didChange', {
      textDocument: { uri: appUri, version }, contentChanges: [{ text: body }],
    });
    await change(2, text + '# done\n');
    const at = { line: text.split('\n').length - 1, character: 6 };
    const r = await req<NextEditResult>(Methods.nextEdit, {
      textDocument: { uri: appUri, version: 2 }, position: at, context: { triggerKind: 2 },
    });
    assert.ok(Array.isArray(r.edits));
    for (const e of r.edits) {
      assert.equal(typeof e.text, 'string');
      assert.deepEqual(e.textDocument, { uri: appUri, version: 2 });
      assert.equal(e.command?.command, 'contenox.acceptNextEdit');
    }
    assert.deepEqual(await req(Methods.nextEdit, { textDocument: { uri: appUri, version: 1 }, position: at }), { edits: [] });
    assert.deepEqual(await req('workspace/executeCommand', { command: 'contenox.rejectNextEdit', arguments: [{ id: 123456 }] }),
      { counted: false });
    await change(3, text);
  });

  test('contenox/explainContext returns the segment table', { timeout: T }, async () => {
    const r = await req<ExplainResult>('contenox/explainContext', {
      textDocument: { uri: appUri }, position: { line: 4, character: 4 },
    });
    const kinds = r.segments.map((s) => s.kind);
    assert.equal(kinds[0], 'system');
    assert.ok(kinds.includes('tools') && kinds.includes('repo_map'), kinds.join(','));
    assert.equal(kinds[kinds.length - 1], 'user');
    let at = 0;
    for (const s of r.segments) {
      assert.equal(s.tokenStart, at, `${s.label} starts where the previous ended`);
      assert.equal(s.tokenEnd - s.tokenStart, s.tokens);
      assert.ok(['cached', 'new'].includes(s.status));
      assert.match(s.byteHash, /^[0-9a-f]{16,}$/);
      at = s.tokenEnd;
    }
    assert.equal(at, r.totalTokens);
    assert.equal(r.reusedTokens + r.newTokens, r.totalTokens);
    // The extension's view model accepts the real answer.
    const view = explainView(r);
    assert.equal(view.rows.length, r.segments.length + (r.dropped?.length ?? 0));
    assert.match(view.summary, /tokens · .* cached · .* new/);
  });

  test('contenox/status reports the session', { timeout: T }, async () => {
    const s = await req<StatusResult>('contenox/status', {});
    assert.ok(STATES.includes(s.state), s.state);
    assert.equal(typeof s.residentTokens, 'number');
    assert.equal(typeof s.pendingPrefillTokens, 'number');
    assert.match(statusBarView(s, true).text, new RegExp(s.state));
  });

  test('contenox/ask streams $/progress partial results that concatenate to the answer', { timeout: T }, async () => {
    const token = 'vscode-test-ask-1';
    const pieces: string[] = [];
    let responded = false;
    let lateProgress = false;
    const sub = server.conn.onProgress(new ProgressType<{ text: string }>(), token, (v) => {
      if (responded) lateProgress = true;
      pieces.push(v.text);
    });
    try {
      const r = await req<AskResult>('contenox/ask', {
        question: 'What does add return?',
        textDocument: { uri: appUri },
        range: { start: { line: 3, character: 0 }, end: { line: 4, character: 16 } },
        maxTokens: MAX_TOKENS,
        partialResultToken: token,
      });
      responded = true;
      assert.ok(pieces.length >= 1, 'at least one partial result');
      assert.equal(pieces.join(''), r.text);
      assert.ok(r.text.length > 0);
      assert.ok(r.metrics.decodeTokens! >= 1 && r.metrics.decodeTokens! <= MAX_TOKENS);
      for (const k of ['reusedTokens', 'newTokens', 'prefillMs', 'ttftMs', 'decodeTokensPerSecond'] as const) {
        assert.equal(typeof r.metrics[k], 'number', k);
      }
      await new Promise((res) => setTimeout(res, 100));
      assert.equal(lateProgress, false, 'all partial results arrive before the response');
    } finally {
      sub.dispose();
    }
    const s = await req<StatusResult>('contenox/status', {});
    assert.equal(typeof s.lastRequest?.ttftMs, 'number');
  });

  test('contenox/ask with a conversationId numbers the turns; contenox/conversation lists and clears them', { timeout: T }, async () => {
    const conversationId = `vscode-test-${Date.now()}`;
    const ask = (question: string) => req<AskResult>('contenox/ask', {
      question, textDocument: { uri: appUri }, maxTokens: MAX_TOKENS, conversationId,
    });
    const first = await ask('What does add return?');
    assert.equal(first.conversationId, conversationId);
    assert.equal(first.turn, 1);
    const second = await ask('And for two strings?');
    assert.equal(second.conversationId, conversationId);
    assert.equal(second.turn, 2);
    const explained = await req<ExplainResult>('contenox/explainContext', { conversationId });
    const labels = explained.segments.map((s) => s.label);
    assert.ok(labels.some((l) => /earlier turn 1/.test(l)) && labels.some((l) => /earlier turn 2/.test(l)), labels.join(','));
    const turns = await req<ConversationTurnsResult>('contenox/conversation', { action: 'list', conversationId });
    assert.deepEqual(turns.turns.map((t) => t.question), ['What does add return?', 'And for two strings?']);
    assert.equal(turns.turns[1].answer, second.text);
    const list = await req<ConversationListResult>('contenox/conversation', { action: 'list' });
    assert.equal(list.active, conversationId);
    assert.equal(list.conversations[0].conversationId, conversationId);
    assert.equal(list.conversations[0].turns, 2);
    const cleared = await req<ConversationClearResult>('contenox/conversation', { action: 'clear', conversationId });
    assert.equal(cleared.removed, 1);
  });

  test('contenox/pin puts the file into a pinned segment; unpin takes it out', { timeout: T }, async () => {
    const utilUri = fileUri(path.join(ws, 'util.py'));
    const p = await req<any>('contenox/pin', { uri: utilUri });
    assert.equal(p.pinned, true);
    assert.equal(p.pin.uri, utilUri);
    const again = await req<any>('contenox/pin', { uri: utilUri });
    assert.equal(again.pinned, false, 'already pinned');
    const list = await req<any>('contenox/listPins', {});
    assert.deepEqual(list.pins.map((x: any) => x.uri), [utilUri]);
    const withPin = await req<ExplainResult>('contenox/explainContext', {});
    const pinned = withPin.segments.filter((s) => s.kind === 'pinned');
    assert.equal(pinned.length, 1, withPin.segments.map((s) => s.label).join(','));
    assert.match(pinned[0].label, /util\.py/);
    assert.ok(pinned[0].tokens > 0);
    const u = await req<any>('contenox/unpin', { uri: utilUri });
    assert.equal(u.removed, 1);
    const without = await req<ExplainResult>('contenox/explainContext', {});
    assert.ok(!without.segments.some((s) => s.kind === 'pinned'));
  });

  test('a path outside the workspace is InvalidParams with a readable message', { timeout: T }, async () => {
    await assert.rejects(req('contenox/pin', { uri: 'file:///etc/hostname' }), (err: any) => {
      assert.equal(err.code, -32602);
      assert.match(describeError(err).message, /outside the workspace/);
      return true;
    });
  });

  test('code actions arrive with contenox.* commands that executeCommand runs', { timeout: T }, async () => {
    const actions = await req<any[]>('textDocument/codeAction', {
      textDocument: { uri: appUri },
      range: { start: { line: 3, character: 0 }, end: { line: 4, character: 16 } },
      context: { diagnostics: [] },
    });
    const byCommand = new Map(actions.map((a) => [a.command?.command, a]));
    assert.ok(byCommand.has('contenox.explain'), JSON.stringify(actions.map((a) => a.title)));
    assert.ok(byCommand.has('contenox.pin'));
    const pinAction = byCommand.get('contenox.pin');
    assert.equal(pinAction.kind, 'source.contenox.pin');
    const r = await req<any>('workspace/executeCommand', { command: 'contenox.pin', arguments: pinAction.command.arguments });
    assert.equal(r.pinned, true);
    const after = await req<any[]>('textDocument/codeAction', {
      textDocument: { uri: appUri },
      range: { start: { line: 0, character: 0 }, end: { line: 0, character: 0 } },
      context: { diagnostics: [], only: ['source.contenox.pin'] },
    });
    assert.deepEqual(after.map((a) => a.command.command), ['contenox.unpin']);
    await req('workspace/executeCommand', { command: 'contenox.unpin', arguments: after[0].command.arguments });
  });

  describe('the extension command handlers on the real server', () => {
    let contenox: Contenox;
    let fake: ReturnType<typeof createFakeVscode>;

    before(async () => {
      fake = createFakeVscode({ workspaceFolder: ws });
      contenox = await activateWith(
        { vscode: fake.vscode as any, createClient: () => server.client, env: process.env, which: () => 'found' },
        { subscriptions: [] },
      );
    });
    after(() => contenox?.dispose());

    test('Explain Context fills the view with the real segments', { timeout: T }, async () => {
      fake.openEditor(path.join(ws, 'app.py'), 'python', [4, 4]);
      (fake.vscode.window.activeTextEditor.document.uri as any).toString = () => appUri;
      const r = await fake.run(COMMANDS.explainContext);
      assert.ok(r, fake.messages.map((m) => m.text).join('\n'));
      const provider = fake.treeView.provider;
      const labels = provider.getChildren().map((n: any) => provider.getTreeItem(n).label);
      assert.equal(labels[0], 'Total');
      assert.ok(labels.includes('system') && labels.includes('user'), labels.join(','));
      assert.match(fake.treeView.description!, /tokens · .* cached/);
    });

    test('Ask streams into the panel; Cancel Ask stops it with RequestCancelled; the next ask works', { timeout: T }, async () => {
      let firstPiece!: () => void;
      const gotPiece = new Promise<void>((r) => { firstPiece = r; });
      const origUpdate = contenox.answer.update.bind(contenox.answer);
      contenox.answer.update = (q, text, state, m, e) => {
        if (state === 'streaming') firstPiece();
        return origUpdate(q, text, state, m, e);
      };
      const pending = fake.run(COMMANDS.ask, { question: 'Write a long story about adding numbers.', maxTokens: 200 });
      await withTimeout(gotPiece, T, 'first partial result');
      assert.equal(await fake.run(COMMANDS.cancelAsk), true);
      assert.equal(await withTimeout(pending, 60_000, 'cancelled ask'), undefined);
      assert.match(fake.panels[0].html.at(-1)!, /Cancelled/);
      assert.ok(!fake.messages.some((m) => m.level === 'error'), fake.messages.map((m) => m.text).join('\n'));
      contenox.answer.update = origUpdate;

      const r = await fake.run(COMMANDS.ask, { question: 'What does add return?', maxTokens: MAX_TOKENS });
      assert.ok(r && r.text.length > 0, 'the next ask answers');
      assert.equal(r.conversationId, contenox.conversationId);
      assert.equal(r.turn, 1, 'the cancelled ask did not join the conversation');
      assert.match(fake.panels[0].html.at(-1)!, /TTFT/);
      const status = await contenox.pollStatus();
      assert.ok(status && STATES.includes(status.state));
      assert.match(fake.statusItem.text, /tok/);
    });

    test('a follow-up from the panel continues the conversation; New Conversation starts over', { timeout: T }, async () => {
      const id = contenox.conversationId;
      const [r] = await fake.panels[0].receive({ type: 'ask', question: 'Why?' }) as (AskResult | undefined)[];
      assert.ok(r, fake.messages.map((m) => m.text).join('\n'));
      assert.equal(r.conversationId, id);
      assert.equal(r.turn, 2);
      assert.match(fake.panels[0].html.at(-1)!, /What does add return\?[\s\S]*Why\?/);
      await fake.run(COMMANDS.newConversation);
      assert.notEqual(contenox.conversationId, id);
      const fresh = await fake.run(COMMANDS.ask, { question: 'What does add return?', maxTokens: MAX_TOKENS });
      assert.equal(fresh.turn, 1);
      assert.doesNotMatch(fake.panels[0].html.at(-1)!, /Why\?/);
    });
  });

  test('shutdown and exit end the server process', { timeout: 60_000 }, async () => {
    await req('shutdown', undefined);
    await server.conn.sendNotification('exit');
    const code = await withTimeout(server.exited, 30_000, 'server exit');
    assert.equal(code, 0);
  });
});
