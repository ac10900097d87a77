/**
 * Unit tests of activation, the command handlers and the presentation helpers, with small
 * injected fakes for `vscode` and the language client (no VS Code, no server).
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, test } from 'node:test';
import * as vm from 'node:vm';
import { activateWith, COMMANDS, type Contenox } from '../src/controller';
import { describeError, explainTable, explainView, statusBarView, shortModel } from '../src/format';
import { SERVER_COMMANDS, type ExplainResult, type StatusResult } from '../src/protocol';
import { DEFAULT_SETTINGS, initializationOptions, resolveLaunch, which } from '../src/settings';
import { createFakeVscode, fakeClientFactory, type FakeClient } from './fakes';

const WS = '/tmp/contenox-ws';
const FILE = `${WS}/app.py`;
const FILE_URI = `file://${FILE}`;

function segment(kind: string, label: string, start: number, end: number, status: string) {
  return {
    kind, label, tokens: end - start, tokenStart: start, tokenEnd: end, status,
    cacheClass: 'high', invalidation: `${kind} inputs`, byteHash: 'ab'.repeat(32), tokenHash: 'cd'.repeat(32),
    truncated: false,
  };
}

const EXPLAIN: ExplainResult = {
  profileId: 'gemma3-270m-cpu@d1361b7f8b86', backend: 'llama', nCtx: 8192,
  totalTokens: 780, reusedTokens: 711, newTokens: 69, residentTokens: 711, pendingPrefillTokens: 53,
  userStart: 764, missReason: 'segment pinned not resident',
  segments: [
    segment('system', 'system', 0, 116, 'cached'),
    segment('tools', 'tools', 116, 555, 'cached'),
    segment('policy', 'policy', 555, 678, 'cached'),
    segment('repo_map', 'repo map', 678, 711, 'cached'),
    segment('pinned', 'pinned app.py:1-7', 711, 764, 'new'),
    segment('user', 'user', 764, 780, 'new'),
  ],
  dropped: [{ kind: 'diff', label: 'diff', cacheClass: 'medium', tokens: 9000, status: 'evicted' }],
};

const STATUS: StatusResult = {
  state: 'warm', model: '/cache/gemma-3-270m-it-Q4_K_M.gguf', backend: 'llama',
  profileId: 'gemma3-270m-cpu@d1361b7f8b86', residentTokens: 711, pendingPrefillTokens: 0,
  lastRequest: { ttftMs: 412.6, reusedTokens: 711, newTokens: 14, decodeTokens: 8, decodeTokensPerSecond: 7.9 },
  index: { state: 'ready', files: 3 },
};

/** Everything one activation needs: fakes, the controller, the fake client. */
async function activate(opts: {
  config?: Record<string, unknown>;
  env?: Record<string, string>;
  found?: boolean;
  setup?: (c: FakeClient) => void;
} = {}) {
  const fake = createFakeVscode({ config: opts.config, workspaceFolder: WS });
  const { factory, clients } = fakeClientFactory((c) => {
    c.handlers['contenox/status'] = () => STATUS;
    c.handlers['contenox/explainContext'] = () => EXPLAIN;
    c.handlers['contenox/listPins'] = () => ({ pins: [] });
    opts.setup?.(c);
  });
  const whichCalls: string[] = [];
  const subscriptions: { dispose(): unknown }[] = [];
  const contenox: Contenox = await activateWith(
    {
      vscode: fake.vscode as any,
      createClient: factory,
      env: opts.env ?? { PATH: '/usr/bin' },
      which: (cmd) => { whichCalls.push(cmd); return opts.found === false ? undefined : `/bin/${cmd}`; },
    },
    { subscriptions },
  );
  return { fake, clients, contenox, whichCalls, subscriptions, client: clients[0] };
}

const flush = () => new Promise((r) => setTimeout(r, 0));

describe('activation', () => {
  test('registers the commands, starts the client with settings as initializationOptions', async () => {
    const { fake, client, contenox } = await activate({ config: { debounceMs: 500, model: '${workspaceFolder}/m.gguf' } });
    for (const id of Object.values(COMMANDS)) assert.ok(fake.commands.has(id), `${id} registered`);
    // The server's executeCommand ids belong to the language client; the extension must not take them.
    for (const id of SERVER_COMMANDS) assert.ok(!fake.commands.has(id), `${id} left to the language client`);
    assert.equal(client.started, 1);
    assert.equal(client.spec.command, 'contenox-lsp');
    assert.equal(client.spec.cwd, WS);
    assert.deepEqual(client.spec.initializationOptions, {
      debounceMs: 500, prefillOnIdle: true, maxTokens: 256, logLevel: 'info', model: `${WS}/m.gguf`,
    });
    assert.ok(client.hooks.documentSelector.some((s) => s.language === 'python' && s.scheme === 'file'));
    await flush();
    assert.match(fake.statusItem.text, /warm/);
    assert.ok(fake.statusItem.shown);
    assert.equal(fake.statusItem.command, COMMANDS.showStatus);
    contenox.dispose();
  });

  test('a missing server shows an actionable error, no client, no exception', async () => {
    const { fake, clients, contenox } = await activate({ found: false });
    assert.equal(clients.length, 0);
    const err = fake.messages.find((m) => m.level === 'error');
    assert.ok(err, 'an error message is shown');
    assert.match(err.text, /contenox-lsp.*not found on PATH/);
    assert.match(err.text, /contenox\.server\.path/);
    assert.doesNotMatch(err.text, /\n\s+at /, 'no stack trace');
    assert.deepEqual(err.items, ['Open Settings', 'Show Log', 'Restart Server']);
    assert.match(fake.statusItem.text, /off/);
    // A command afterwards repeats the reason instead of failing obscurely.
    fake.messages.length = 0;
    assert.equal(await fake.run(COMMANDS.explainContext), undefined);
    assert.match(fake.messages[0].text, /not found on PATH/);
    contenox.dispose();
  });

  test('a server that fails to start is reported with its reason', async () => {
    const { fake, contenox } = await activate({
      setup: (c) => { c.startError = new Error('Pending response rejected since connection got disposed\n    at foo (x.js:1:1)'); },
    });
    const err = fake.messages.find((m) => m.level === 'error');
    assert.ok(err);
    assert.match(err.text, /failed to start: Pending response rejected/);
    assert.doesNotMatch(err.text, /at foo/);
    contenox.dispose();
  });

  test("a failed start reports the server's last stderr line", async () => {
    const { fake, contenox } = await activate({
      setup: (c) => {
        c.startError = new Error('Pending response rejected since connection got disposed');
        c.lastError = () => 'contenox-lsp: error: unrecognized arguments: --bogus';
      },
    });
    const errs = fake.messages.filter((m) => m.level === 'error');
    assert.equal(errs.length, 1, 'reported once');
    assert.match(errs[0].text, /failed to start: contenox-lsp: error: unrecognized arguments: --bogus/);
    contenox.dispose();
  });

  test('a server that dies for good is reported through onFatal', async () => {
    const { fake, client, contenox } = await activate();
    client.crash();
    client.hooks.onFatal('Contenox: the language server "contenox-lsp" stopped 3 times');
    assert.match(fake.statusItem.text, /off/);
    assert.ok(fake.messages.some((m) => m.level === 'error' && /stopped 3 times/.test(m.text)));
    contenox.dispose();
  });

  test('restart stops the old client and starts a new one', async () => {
    const { fake, clients, contenox } = await activate();
    assert.equal(await fake.run(COMMANDS.restartServer), true);
    assert.equal(clients.length, 2);
    assert.equal(clients[0].stopped, 1);
    assert.equal(clients[1].started, 1);
    contenox.dispose();
  });
});

describe('commands', () => {
  test('Explain Context focuses the view and lists the segments with totals', async () => {
    const { fake, client, contenox } = await activate();
    fake.openEditor(FILE, 'python', [3, 4]);
    const result = await fake.run(COMMANDS.explainContext);
    assert.equal(result.totalTokens, 780);
    assert.ok(fake.executed.some((e) => e.id === 'contenox.context.focus'));
    const req = client.sent.find((r) => r.method === 'contenox/explainContext');
    assert.deepEqual(req?.params, {
      conversationId: contenox.conversationId, textDocument: { uri: FILE_URI }, position: { line: 3, character: 4 },
    });
    const provider = fake.treeView.provider;
    const nodes = provider.getChildren();
    const items = nodes.map((n: unknown) => provider.getTreeItem(n));
    assert.deepEqual(items.map((i: any) => i.label),
      ['Total', 'system', 'tools', 'policy', 'repo map', 'pinned app.py:1-7', 'user', 'diff']);
    assert.equal(items[1].description, '116 tokens · cached');
    assert.equal(items[5].description, '53 tokens · new');
    assert.equal(items[7].description, '9,000 tokens · evicted');
    assert.equal(items[1].iconPath.id, 'pass-filled');
    assert.equal(items[5].iconPath.id, 'circle-large-outline');
    assert.match(items[0].description, /780 tokens · 711 cached · 69 new/);
    assert.match(String(items[1].tooltip), /cache class: high/);
    assert.equal(fake.treeView.description, '780 tokens · 711 cached · 69 new');
    contenox.dispose();
  });

  test('Ask streams partial results into the panel and shows the final answer and metrics', async () => {
    const pieces = ['It ', 'adds ', '`a` and `b`.'];
    const { fake, client, contenox } = await activate({
      setup: (c) => {
        c.handlers['contenox/ask'] = async (params) => {
          for (const p of pieces) {
            c.emitProgress(params.partialResultToken, { text: p });
            await new Promise((r) => setTimeout(r, 5));
          }
          await new Promise((r) => setTimeout(r, 250)); // longer than the panel's render throttle
          return { text: pieces.join(''), metrics: { ttftMs: 120, reusedTokens: 711, newTokens: 14, decodeTokens: 3, decodeTokensPerSecond: 8 } };
        };
      },
    });
    fake.openEditor(FILE, 'python', [0, 0], [1, 16]);
    fake.inputAnswers.push('What does add do?');
    const result = await fake.run(COMMANDS.ask);
    assert.equal(result.text, 'It adds `a` and `b`.');
    const req = client.sent.find((r) => r.method === 'contenox/ask')!;
    assert.equal(req.params.question, 'What does add do?');
    assert.deepEqual(req.params.textDocument, { uri: FILE_URI });
    assert.deepEqual(req.params.range, { start: { line: 0, character: 0 }, end: { line: 1, character: 16 } });
    assert.equal(typeof req.params.partialResultToken, 'string');
    assert.ok(!('maxTokens' in req.params), 'the server default (initializationOptions) applies');
    assert.equal(client.progressListeners(req.params.partialResultToken), 0, 'progress listener disposed');
    const panel = fake.panels[0];
    assert.equal(panel.title, 'Contenox: Conversation');
    assert.equal(req.params.conversationId, contenox.conversationId);
    const final = panel.html[panel.html.length - 1];
    assert.match(final, /It adds `a` and `b`\./);
    assert.match(final, /TTFT 120 ms/);
    assert.match(final, /Content-Security-Policy/);
    // While streaming, partial text was rendered (coalesced) before the final page.
    assert.ok(fake.renderedMarkdown.some((md) => md.includes('It ') && !md.includes('TTFT')),
      'a partial answer was rendered');
    assert.equal(fake.progressRuns[0].cancellable, true);
    contenox.dispose();
  });

  test('Ask with a question argument and maxTokens skips the input box', async () => {
    const { fake, client, contenox } = await activate({
      setup: (c) => { c.handlers['contenox/ask'] = () => ({ text: 'ok', metrics: {} }); },
    });
    const r = await fake.run(COMMANDS.ask, { question: 'hi', maxTokens: 4 });
    assert.equal(r.text, 'ok');
    const req = client.sent.find((x) => x.method === 'contenox/ask')!;
    assert.equal(req.params.maxTokens, 4);
    assert.ok(!('textDocument' in req.params), 'no editor → no document');
    contenox.dispose();
  });

  test('Ask About Test Output sends the clipboard along; an empty clipboard sends nothing', async () => {
    const { fake, client, contenox } = await activate({
      setup: (c) => { c.handlers['contenox/ask'] = () => ({ text: 'ok', metrics: {} }); },
    });
    const trace = 'Traceback (most recent call last):\n  File "app.py", line 3, in add\nTypeError: boom\n';
    fake.clipboard.text = trace;
    fake.inputAnswers.push('Why does add fail?');
    assert.equal((await fake.run(COMMANDS.askWithTestOutput)).text, 'ok');
    const req = client.sent.find((x) => x.method === 'contenox/ask')!;
    assert.equal(req.params.question, 'Why does add fail?');
    assert.deepEqual(req.params.outputs, [{ kind: 'test', source: 'clipboard', text: trace }]);
    fake.clipboard.text = '  \n';
    assert.equal(await fake.run(COMMANDS.askWithTestOutput), undefined);
    assert.equal(client.sent.filter((x) => x.method === 'contenox/ask').length, 1);
    assert.ok(fake.messages.some((m) => m.level === 'warning' && m.text.includes('clipboard is empty')));
    contenox.dispose();
  });

  test('an empty question does nothing', async () => {
    const { fake, client, contenox } = await activate();
    fake.inputAnswers.push('');
    assert.equal(await fake.run(COMMANDS.ask), undefined);
    assert.ok(!client.sent.some((x) => x.method === 'contenox/ask'));
    contenox.dispose();
  });

  test('Cancel Ask cancels the request token; the panel says cancelled, no error shown', async () => {
    let started!: () => void;
    const running = new Promise<void>((r) => { started = r; });
    const { fake, contenox } = await activate({
      setup: (c) => {
        c.handlers['contenox/ask'] = (params, req) => new Promise((_resolve, reject) => {
          c.emitProgress(params.partialResultToken, { text: 'partial' });
          req.token!.onCancellationRequested(() => reject(Object.assign(new Error('Request cancelled'), { code: -32800 })));
          started();
        });
      },
    });
    const pending = fake.run(COMMANDS.ask, 'long question');
    await running;
    assert.equal(await fake.run(COMMANDS.cancelAsk), true);
    assert.equal(await pending, undefined);
    const panel = fake.panels[0];
    assert.match(panel.html[panel.html.length - 1], /Cancelled/);
    assert.match(panel.html[panel.html.length - 1], /partial/);
    assert.ok(!fake.messages.some((m) => m.level === 'error'));
    assert.equal(await fake.run(COMMANDS.cancelAsk), false, 'nothing left to cancel');
    contenox.dispose();
  });

  test('the progress notification Cancel button cancels too', async () => {
    const { fake, contenox } = await activate({
      setup: (c) => {
        c.handlers['contenox/ask'] = (_p, req) => new Promise((_res, reject) => {
          req.token!.onCancellationRequested(() => reject(Object.assign(new Error('x'), { code: -32800 })));
        });
      },
    });
    const pending = fake.run(COMMANDS.ask, 'q');
    await flush();
    fake.progressRuns[0].cancel();
    assert.equal(await pending, undefined);
    assert.ok(!fake.messages.some((m) => m.level === 'error'));
    contenox.dispose();
  });

  test('a server error is shown as one readable line with its stable code', async () => {
    const { fake, contenox } = await activate({
      setup: (c) => {
        c.handlers['contenox/ask'] = () => {
          throw Object.assign(new Error('model file not found: /x.gguf\nTraceback ...'), { code: -32004, data: { code: 'model_not_found' } });
        };
      },
    });
    assert.equal(await fake.run(COMMANDS.ask, 'q'), undefined);
    const err = fake.messages.find((m) => m.level === 'error')!;
    assert.equal(err.text, 'Contenox: Ask failed: model file not found: /x.gguf [model_not_found]');
    assert.match(fake.panels[0].html.at(-1)!, /model file not found/);
    contenox.dispose();
  });

  test('Pin File pins the active file (selection → range) and Unpin File removes its pins', async () => {
    const { fake, client, contenox } = await activate({
      setup: (c) => {
        c.handlers['contenox/pin'] = (p) => ({ pinned: true, pin: { uri: p.uri, range: null, label: 'app.py', tokens: 36 } });
        c.handlers['contenox/unpin'] = () => ({ removed: 1 });
      },
    });
    fake.openEditor(FILE);
    const r = await fake.run(COMMANDS.pinFile);
    assert.equal(r.pinned, true);
    assert.deepEqual(client.sent.find((x) => x.method === 'contenox/pin')!.params, { uri: FILE_URI });
    assert.ok(fake.messages.some((m) => m.text === 'Contenox: pinned app.py (36 tokens).'));

    fake.openEditor(FILE, 'python', [2, 0], [4, 3]);
    await fake.run(COMMANDS.pinFile);
    assert.deepEqual(client.sent.filter((x) => x.method === 'contenox/pin')[1].params.range,
      { start: { line: 2, character: 0 }, end: { line: 4, character: 3 } });

    // From the Explorer: the clicked file, no range.
    await fake.run(COMMANDS.pinFile, fake.vscode.Uri.file(`${WS}/other.py`));
    assert.deepEqual(client.sent.filter((x) => x.method === 'contenox/pin')[2].params, { uri: `file://${WS}/other.py` });

    const u = await fake.run(COMMANDS.unpinFile);
    assert.equal(u.removed, 1);
    assert.deepEqual(client.sent.find((x) => x.method === 'contenox/unpin')!.params, { uri: FILE_URI });
    assert.ok(fake.messages.some((m) => m.text === 'Contenox: removed 1 pin.'));
    contenox.dispose();
  });

  test('Pin File without a file asks for one', async () => {
    const { fake, client, contenox } = await activate();
    assert.equal(await fake.run(COMMANDS.pinFile), undefined);
    assert.ok(fake.messages.some((m) => m.level === 'warning' && /open a file/.test(m.text)));
    assert.ok(!client.sent.some((x) => x.method === 'contenox/pin'));
    contenox.dispose();
  });

  test('Show Status lists state, model, tokens and pins, with actions', async () => {
    const { fake, contenox } = await activate({
      setup: (c) => { c.handlers['contenox/listPins'] = () => ({ pins: [{ uri: FILE_URI, range: null, label: 'app.py', tokens: 36 }] }); },
    });
    const s = await fake.run(COMMANDS.showStatus);
    assert.equal(s.state, 'warm');
    const qp = fake.quickPicks[0];
    const byLabel = Object.fromEntries(qp.items.map((i: any) => [i.label, i.description]));
    assert.equal(byLabel.State, 'warm');
    assert.equal(byLabel.Model, '/cache/gemma-3-270m-it-Q4_K_M.gguf');
    assert.equal(byLabel['Resident tokens'], '711');
    assert.equal(byLabel.Pins, 'app.py (36 tok)');
    assert.ok(qp.items.some((i: any) => i.run === COMMANDS.restartServer));
    contenox.dispose();
  });

  test('the context view refreshes after an edit (debounced) while visible', async () => {
    const { fake, client, contenox } = await activate({ config: { debounceMs: 0 } });
    fake.openEditor(FILE);
    const count = () => client.sent.filter((x) => x.method === 'contenox/explainContext').length;
    fake.docChanges.fire({ document: { uri: fake.vscode.Uri.file(FILE), languageId: 'python' }, contentChanges: [{}] });
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(count(), 0, 'hidden view → no refresh');
    fake.treeView.visible = true;
    fake.treeVisibility.fire({ visible: true });
    await new Promise((r) => setTimeout(r, 20));
    assert.equal(count(), 1, 'becoming visible refreshes');
    fake.docChanges.fire({ document: { uri: fake.vscode.Uri.file(FILE), languageId: 'python' }, contentChanges: [{}] });
    fake.docChanges.fire({ document: { uri: fake.vscode.Uri.file(FILE), languageId: 'python' }, contentChanges: [{}] });
    await new Promise((r) => setTimeout(r, 400));
    assert.equal(count(), 2, 'two quick edits → one refresh');
    contenox.dispose();
  });

  test('a settings change offers a restart', async () => {
    const { fake, contenox } = await activate();
    fake.configChanges.fire({ affectsConfiguration: (s: string) => s === 'contenox' || s === 'contenox.model' });
    assert.ok(fake.messages.some((m) => /restart the language server/.test(m.text) && m.items[0] === 'Restart Server'));
    contenox.dispose();
  });

  test('a settings change starts a server that was not running', async () => {
    let found = false;
    const fake = createFakeVscode({ workspaceFolder: WS });
    const { factory, clients } = fakeClientFactory((c) => { c.handlers['contenox/status'] = () => STATUS; });
    const contenox = await activateWith(
      { vscode: fake.vscode as any, createClient: factory, env: {}, which: (cmd) => (found ? cmd : undefined) },
      { subscriptions: [] },
    );
    assert.equal(clients.length, 0);
    found = true;
    fake.config['server.path'] = '/opt/contenox-lsp';
    fake.configChanges.fire({ affectsConfiguration: (s: string) => s === 'contenox' || s.startsWith('contenox.server') });
    await flush();
    assert.equal(clients.length, 1);
    assert.equal(clients[0].spec.command, '/opt/contenox-lsp');
    assert.equal(clients[0].started, 1);
    contenox.dispose();
  });

  test('dispose through the extension context stops the client', async () => {
    const { client, subscriptions } = await activate();
    subscriptions.forEach((s) => s.dispose());
    await flush();
    assert.equal(client.stopped, 1);
  });
});

/** An ask handler that answers "answer <n>" and reports the turn like the server does. */
function conversationServer(c: FakeClient): { turns: Map<string, number> } {
  const turns = new Map<string, number>();
  c.handlers['contenox/ask'] = (params) => {
    const n = (turns.get(params.conversationId) ?? 0) + 1;
    turns.set(params.conversationId, n);
    return { text: `answer ${n} to ${params.question}`, metrics: { ttftMs: 50 }, conversationId: params.conversationId, turn: n };
  };
  return { turns };
}

const asks = (client: FakeClient) => client.sent.filter((r) => r.method === 'contenox/ask');

describe('conversation', () => {
  test('asks in a row continue one conversation; the panel shows the earlier turns', async () => {
    const { fake, client, contenox } = await activate({ setup: (c) => { conversationServer(c); } });
    const first = await fake.run(COMMANDS.ask, 'What does add do?');
    assert.equal(first.turn, 1);
    const second = await fake.run(COMMANDS.ask, 'And for strings?');
    assert.equal(second.turn, 2);
    const [a, b] = asks(client);
    assert.equal(typeof a.params.conversationId, 'string');
    assert.ok(a.params.conversationId.length >= 1 && a.params.conversationId.length <= 200);
    assert.equal(b.params.conversationId, a.params.conversationId, 'the follow-up continues the conversation');
    assert.equal(contenox.conversationId, a.params.conversationId);
    assert.deepEqual(contenox.history.map((t) => [t.question, t.answer, t.turn]), [
      ['What does add do?', 'answer 1 to What does add do?', 1],
      ['And for strings?', 'answer 2 to And for strings?', 2],
    ]);
    assert.equal(fake.panels.length, 1, 'one panel, reused');
    const panel = fake.panels[0];
    // The page rendered for the second question already holds the first turn above it.
    const opened = panel.html.find((h) => h.includes('And for strings?'))!;
    assert.ok(opened, 'the second question was rendered');
    assert.ok(opened.indexOf('What does add do?') >= 0 && opened.indexOf('What does add do?') < opened.indexOf('And for strings?'));
    assert.match(opened, /answer 1 to What does add do\?/);
    const final = panel.html.at(-1)!;
    assert.match(final, /What does add do\?[\s\S]*answer 1 to What does add do\?[\s\S]*And for strings\?[\s\S]*answer 2 to And for strings\?/);
    assert.match(final, /TTFT 50 ms/);
    // Explain Context shows the same conversation's segments.
    await fake.run(COMMANDS.explainContext);
    assert.equal(client.sent.find((r) => r.method === 'contenox/explainContext')!.params.conversationId, a.params.conversationId);
    contenox.dispose();
  });

  test('questions are escaped, never rendered as Markdown or HTML', async () => {
    const { fake, contenox } = await activate({
      setup: (c) => { c.handlers['contenox/ask'] = () => ({ text: 'plain answer', metrics: {} }); },
    });
    const evil = '<img src=x onerror="alert(1)"> & **bold**';
    await fake.run(COMMANDS.ask, evil);
    await fake.run(COMMANDS.ask, 'next');
    const final = fake.panels[0].html.at(-1)!;
    assert.ok(!final.includes('<img src=x'), 'no HTML from the question');
    const escaped = '&lt;img src=x onerror=&quot;alert(1)&quot;&gt; &amp; **bold**';
    assert.equal(final.split(`<blockquote class="question">${escaped}</blockquote>`).length, 2,
      'the earlier question is shown once, escaped');
    assert.ok(!fake.renderedMarkdown.some((md) => md.includes('onerror')), 'questions do not go through the Markdown renderer');
    contenox.dispose();
  });

  test('New Conversation starts a new id; the next ask does not show the earlier turn', async () => {
    const { fake, client, contenox } = await activate({ setup: (c) => { conversationServer(c); } });
    await fake.run(COMMANDS.ask, 'first question');
    const oldId = contenox.conversationId;
    const newId = await fake.run(COMMANDS.newConversation);
    assert.notEqual(newId, oldId);
    assert.equal(contenox.conversationId, newId);
    assert.deepEqual(contenox.history, []);
    const panel = fake.panels[0];
    await flush();
    assert.doesNotMatch(panel.html.at(-1)!, /first question/, 'the panel is reset');
    assert.match(panel.html.at(-1)!, /A new conversation/);
    const r = await fake.run(COMMANDS.ask, 'second question');
    assert.equal(r.turn, 1, 'a new conversation starts at turn 1');
    const [a, b] = asks(client);
    assert.equal(a.params.conversationId, oldId);
    assert.equal(b.params.conversationId, newId);
    const final = panel.html.at(-1)!;
    assert.match(final, /second question/);
    assert.doesNotMatch(final, /first question/);
    assert.equal(fake.panels.length, 1);
    contenox.dispose();
  });

  test('New Conversation cancels a running ask, which then stays off the new panel', async () => {
    let started!: () => void;
    const running = new Promise<void>((r) => { started = r; });
    const { fake, contenox } = await activate({
      setup: (c) => {
        c.handlers['contenox/ask'] = (params, req) => new Promise((_resolve, reject) => {
          c.emitProgress(params.partialResultToken, { text: 'old partial' });
          req.token!.onCancellationRequested(() => reject(Object.assign(new Error('cancelled'), { code: -32800 })));
          started();
        });
      },
    });
    const pending = fake.run(COMMANDS.ask, 'slow question');
    await running;
    await fake.run(COMMANDS.newConversation);
    assert.equal(await pending, undefined);
    await new Promise((r) => setTimeout(r, 150)); // past the panel's render throttle
    const last = fake.panels[0].html.at(-1)!;
    assert.doesNotMatch(last, /slow question|old partial|Cancelled/);
    assert.deepEqual(contenox.history, []);
    contenox.dispose();
  });

  test('the page has a follow-up input and a New conversation button, under the CSP nonce', async () => {
    const { fake, contenox } = await activate({ setup: (c) => { conversationServer(c); } });
    await fake.run(COMMANDS.ask, 'q');
    const page = fake.panels[0].html.at(-1)!;
    assert.match(page, /<textarea id="question"/);
    assert.match(page, /<button id="ask"[^>]*>Ask<\/button>/);
    assert.match(page, /<button id="new"[^>]*>New conversation<\/button>/);
    assert.match(page, /acquireVsCodeApi\(\)/);
    assert.match(page, /postMessage\(\{ type: 'ask', question \}\)/);
    assert.match(page, /postMessage\(\{ type: 'new' \}\)/);
    const nonce = /script-src 'nonce-([A-Za-z0-9]+)'/.exec(page)?.[1];
    assert.ok(nonce, 'a script nonce in the CSP');
    assert.equal(page.split('<script').length, 2, 'one script');
    assert.match(page, new RegExp(`<script nonce="${nonce}">`));
    contenox.dispose();
  });

  test('an ask message from the page asks in the current conversation', async () => {
    const { fake, client, contenox } = await activate({ setup: (c) => { conversationServer(c); } });
    fake.openEditor(FILE, 'python', [3, 0], [4, 16]);
    await fake.run(COMMANDS.ask, 'What does add do?');
    // Focus moves into the panel: no file editor is active any more.
    fake.vscode.window.activeTextEditor = undefined;
    const panel = fake.panels[0];
    assert.equal(panel.messageListeners.length, 1);
    const [result] = await panel.receive({ type: 'ask', question: 'And for strings?' }) as any[];
    assert.equal(result.turn, 2);
    const [a, b] = asks(client);
    assert.equal(b.params.question, 'And for strings?');
    assert.equal(b.params.conversationId, a.params.conversationId);
    assert.deepEqual(b.params.textDocument, { uri: FILE_URI }, 'the follow-up is about the same file');
    assert.deepEqual(b.params.range, a.params.range);
    assert.match(panel.html.at(-1)!, /What does add do\?[\s\S]*And for strings\?[\s\S]*answer 2 to And for strings\?/);
    assert.equal(contenox.history.length, 2);
    // Anything else from the page is ignored.
    await panel.receive({ type: 'ask', question: 42 });
    await panel.receive({ type: 'ask', question: '   ' });
    await panel.receive({ type: 'bogus' });
    await panel.receive('ask');
    assert.equal(asks(client).length, 2);
    contenox.dispose();
  });

  test('a new message from the page starts a new conversation', async () => {
    const { fake, client, contenox } = await activate({ setup: (c) => { conversationServer(c); } });
    await fake.run(COMMANDS.ask, 'first question');
    const oldId = contenox.conversationId;
    const panel = fake.panels[0];
    await panel.receive({ type: 'new' });
    assert.notEqual(contenox.conversationId, oldId);
    assert.deepEqual(contenox.history, []);
    await flush();
    assert.doesNotMatch(panel.html.at(-1)!, /first question/);
    await panel.receive({ type: 'ask', question: 'fresh start' });
    const b = asks(client)[1];
    assert.equal(b.params.conversationId, contenox.conversationId);
    assert.notEqual(b.params.conversationId, oldId);
    assert.doesNotMatch(panel.html.at(-1)!, /first question/);
    contenox.dispose();
  });

  test("the page's script posts ask/new messages and renders streamed answers (DOM stub)", async () => {
    const { fake, contenox } = await activate({ setup: (c) => { conversationServer(c); } });
    await fake.run(COMMANDS.ask, 'q');
    const page = fake.panels[0].html.at(-1)!;
    const script = /<script nonce="[^"]+">([\s\S]*?)<\/script>/.exec(page)![1];
    const run = (state: unknown) => {
      const posted: unknown[] = [];
      const saved: unknown[] = [];
      type Handler = (e: any) => void;
      const el = (id: string) => {
        const on: Record<string, Handler> = {};
        return {
          id, value: '', innerHTML: '', focused: false, on,
          addEventListener: (type: string, h: Handler) => { on[type] = h; },
          focus() { this.focused = true; },
        };
      };
      const els: Record<string, ReturnType<typeof el>> = {
        current: el('current'), question: el('question'), ask: el('ask'), new: el('new'),
      };
      const winOn: Record<string, Handler> = {};
      const sandbox = {
        acquireVsCodeApi: () => ({
          postMessage: (m: unknown) => posted.push(JSON.parse(JSON.stringify(m))), // a clone, as postMessage does
          getState: () => state,
          setState: (s: unknown) => saved.push(JSON.parse(JSON.stringify(s))),
        }),
        document: { getElementById: (id: string) => els[id], body: { dataset: { scroll: 'restore' }, scrollHeight: 1000 } },
        window: { innerHeight: 500, scrollY: 0, addEventListener: (t: string, h: Handler) => { winOn[t] = h; }, scrollTo() {} },
      };
      vm.runInNewContext(script, sandbox);
      return { posted, saved, els, winOn };
    };
    const a = run({ draft: 'half a question', focused: true });
    assert.equal(a.els.question.value, 'half a question', 'the draft survives a re-render of the page');
    assert.equal(a.els.question.focused, true);
    a.els.question.value = '  Why?  ';
    let prevented = false;
    a.els.question.on.keydown({ key: 'Enter', shiftKey: false, isComposing: false, preventDefault: () => { prevented = true; } });
    assert.equal(prevented, true);
    assert.deepEqual(a.posted, [{ type: 'ask', question: 'Why?' }]);
    assert.equal(a.els.question.value, '', 'the input is cleared');
    a.els.question.value = 'line one';
    a.els.question.on.keydown({ key: 'Enter', shiftKey: true, preventDefault: () => assert.fail('Shift+Enter is a new line') });
    a.els.ask.on.click({});
    a.els.new.on.click({});
    assert.deepEqual(a.posted.slice(1), [{ type: 'ask', question: 'line one' }, { type: 'new' }]);
    a.winOn.message({ data: { type: 'render', html: '<p>streamed</p>' } });
    assert.equal(a.els.current.innerHTML, '<p>streamed</p>');
    const b = run(undefined);
    assert.equal(b.els.question.value, '');
    b.els.ask.on.click({});
    assert.deepEqual(b.posted, [], 'an empty question is not sent');
    contenox.dispose();
  });

  test('package.json contributes exactly the extension commands', () => {
    const pkg = JSON.parse(fs.readFileSync(path.resolve('package.json'), 'utf8'));
    const contributed: string[] = pkg.contributes.commands.map((c: { command: string }) => c.command).sort();
    for (const id of SERVER_COMMANDS) assert.ok(!contributed.includes(id), id);
    assert.deepEqual(contributed, Object.values(COMMANDS).sort());
    const nc = pkg.contributes.commands.find((c: { command: string }) => c.command === COMMANDS.newConversation);
    assert.deepEqual([nc.title, nc.category], ['New Conversation', 'Contenox']);
  });
});

describe('next edit', () => {
  const TEXT = 'def add(first, b):\n    return a + b\n';
  /** The server's answer: replace `a` on line 1 with `first` (for document version 2). */
  const EDIT = {
    text: 'first',
    textDocument: { uri: FILE_URI, version: 2 },
    range: { start: { line: 1, character: 11 }, end: { line: 1, character: 12 } },
    command: { title: 'Accept next edit', command: 'contenox.acceptNextEdit', arguments: [{ id: 7 }] },
  };
  const wait = (ms: number) => new Promise((r) => setTimeout(r, ms));
  const pos = (p: { line: number; character: number }) => ({ line: p.line, character: p.character });

  /** Activate, open app.py (version 1), type once (version 2): the request follows the quiet time. */
  async function typed(answer: (params: any) => unknown = () => ({ edits: [EDIT] }), config: Record<string, unknown> = {}) {
    const a = await activate({ config, setup: (c) => {
      c.handlers['contenox/nextEdit'] = answer;
      c.handlers['workspace/executeCommand'] = () => ({ counted: true });
    } });
    const editor = a.fake.openEditor(FILE, 'python', [0, 8], [0, 8], TEXT.replace('first', 'a'));
    const doc = editor.document;
    doc.replace(new (a.fake.vscode.Range as any)(0, 8, 0, 9), 'first');
    a.fake.docChanges.fire({ document: doc, contentChanges: [{ text: 'first' }] });
    return { ...a, editor, doc };
  }
  const requests = (c: FakeClient, method = 'contenox/nextEdit') => c.sent.filter((r) => r.method === method);

  test('after an edit settles, one request at the cursor; the suggestion is drawn', async () => {
    const { fake, client, contenox, editor } = await typed();
    fake.docChanges.fire({ document: editor.document, contentChanges: [{ text: '' }] }); // typing goes on
    await wait(600);
    const sent = requests(client);
    assert.equal(sent.length, 1, 'debounced: one request');
    assert.deepEqual(sent[0].params, {
      textDocument: { uri: FILE_URI, version: 2 }, position: { line: 0, character: 8 }, context: { triggerKind: 2 },
    });
    const [removed, inserted] = fake.decorationTypes;
    assert.equal(removed.options.textDecoration, 'line-through');
    const struck = editor.decorations.get(removed)!;
    assert.deepEqual([pos(struck[0].range.start), pos(struck[0].range.end)], [{ line: 1, character: 11 }, { line: 1, character: 12 }]);
    const ghost = editor.decorations.get(inserted)!;
    assert.equal(ghost[0].renderOptions.after.contentText, 'first');
    assert.deepEqual(pos(ghost[0].range.start), { line: 1, character: 12 });
    assert.match(ghost[0].hoverMessage.value, /Tab jumps/);
    assert.equal(fake.contextKeys['contenox.nextEditVisible'], true);
    assert.deepEqual(client.notified, [{ method: 'textDocument/didShowInlineEdit', params: { item: EDIT } }]);
    contenox.dispose();
  });

  test('Tab jumps to it, Tab again applies it and runs its accept command', async () => {
    const { fake, client, contenox, editor, doc } = await typed();
    await wait(600);
    await fake.run(COMMANDS.nextEditJumpOrApply);
    assert.deepEqual(pos(editor.selection.active), { line: 1, character: 11 }, 'jumped');
    assert.equal(doc.getText(), TEXT.replace('first', 'first'), 'not applied yet');
    await fake.run(COMMANDS.nextEditJumpOrApply);
    assert.equal(doc.getText(), 'def add(first, b):\n    return first + b\n');
    assert.equal(fake.contextKeys['contenox.nextEditVisible'], false);
    assert.deepEqual(editor.decorations.get(fake.decorationTypes[0]), []);
    assert.deepEqual(requests(client, 'workspace/executeCommand').map((r) => r.params),
      [{ command: 'contenox.acceptNextEdit', arguments: [{ id: 7 }] }]);
    assert.equal(await fake.run(COMMANDS.nextEditJumpOrApply), false, 'nothing shown: nothing to do');
    contenox.dispose();
  });

  test('Esc dismisses it and tells the server; a change to the document hides it', async () => {
    const { fake, client, contenox, editor, doc } = await typed();
    await wait(600);
    assert.equal(await fake.run(COMMANDS.nextEditDismiss), true);
    assert.equal(contenox.nextEdits.current, undefined);
    assert.deepEqual(requests(client, 'workspace/executeCommand').map((r) => r.params),
      [{ command: 'contenox.rejectNextEdit', arguments: [{ id: 7 }] }]);
    contenox.nextEdits.show(editor as any, EDIT, doc.version);
    fake.docChanges.fire({ document: doc, contentChanges: [{ text: 'x' }] });
    assert.equal(contenox.nextEdits.current, undefined, 'stale once the document changes');
    assert.equal(fake.contextKeys['contenox.nextEditVisible'], false);
    contenox.dispose();
  });

  test('an answer for an older version is not drawn; the setting turns requests off', async () => {
    let editorRef: any;
    const late = await typed(async () => {
      editorRef.document.replace(new (late.fake.vscode.Range as any)(0, 0, 0, 0), '#'); // typed meanwhile
      return { edits: [EDIT] };
    });
    editorRef = late.editor;
    await wait(600);
    assert.equal(requests(late.client).length, 1);
    assert.equal(late.contenox.nextEdits.current, undefined, 'stale answer dropped');
    late.contenox.dispose();
    const off = await typed(undefined, { 'nextEdit.enabled': false });
    await wait(600);
    assert.equal(requests(off.client).length, 0);
    off.contenox.dispose();
  });

  test('package.json binds Tab and Esc only while a suggestion is shown', () => {
    const pkg = JSON.parse(fs.readFileSync(path.resolve('package.json'), 'utf8'));
    const keys = pkg.contributes.keybindings.filter((k: { command: string }) => k.command.startsWith('contenox.nextEdit.'));
    assert.deepEqual(keys.map((k: { key: string }) => k.key).sort(), ['escape', 'tab']);
    for (const k of keys) assert.match(k.when, /^contenox\.nextEditVisible && /);
    assert.equal(pkg.contributes.configuration.properties['contenox.nextEdit.enabled'].default, true);
  });
});

describe('settings', () => {
  const env = { PATH: '/usr/bin' };
  test('default: contenox-lsp on PATH', () => {
    const s = resolveLaunch(DEFAULT_SETTINGS, env, WS);
    assert.deepEqual([s.command, s.args, s.source], ['contenox-lsp', [], 'PATH']);
  });
  test('server.path wins, then pythonPath, then CONTENOX_LSP_COMMAND', () => {
    const e = { ...env, CONTENOX_LSP_COMMAND: 'python3 -m contenox_lsp.cli' };
    assert.deepEqual(resolveLaunch(DEFAULT_SETTINGS, e, WS).command, 'python3');
    assert.deepEqual(resolveLaunch(DEFAULT_SETTINGS, e, WS).args, ['-m', 'contenox_lsp.cli']);
    const py = resolveLaunch({ ...DEFAULT_SETTINGS, pythonPath: '${workspaceFolder}/.venv/bin/python' }, e, WS);
    assert.deepEqual([py.command, py.args, py.source], [`${WS}/.venv/bin/python`, ['-m', 'contenox_lsp'], 'server.pythonPath']);
    const sp = resolveLaunch({ ...DEFAULT_SETTINGS, serverPath: '/opt/cx/contenox-lsp', pythonPath: 'x', serverArgs: ['--log-level', 'debug'] }, e, WS);
    assert.deepEqual([sp.command, sp.args, sp.source], ['/opt/cx/contenox-lsp', ['--log-level', 'debug'], 'server.path']);
  });
  test('initializationOptions carry only the options the server knows', () => {
    assert.deepEqual(initializationOptions(DEFAULT_SETTINGS, WS),
      { debounceMs: 300, prefillOnIdle: true, maxTokens: 256, logLevel: 'info' });
    assert.deepEqual(initializationOptions({ ...DEFAULT_SETTINGS, profile: 'p.toml', prefillOnIdle: false }, WS),
      { debounceMs: 300, prefillOnIdle: false, maxTokens: 256, logLevel: 'info', profile: 'p.toml' });
  });
  test('which finds executables on PATH and checks explicit paths', () => {
    assert.ok(which('node', process.env));
    assert.equal(which('definitely-not-a-command-xyz', process.env), undefined);
    assert.equal(which('/nonexistent/contenox-lsp', process.env), undefined);
    assert.equal(which(process.execPath, process.env), process.execPath);
  });
});

describe('format', () => {
  test('explain view and table', () => {
    const v = explainView(EXPLAIN);
    assert.equal(v.rows.length, 7);
    assert.equal(v.rows.filter((r) => r.status === 'cached').length, 4);
    const table = explainTable(EXPLAIN);
    assert.match(table, /^system:\s+116 tokens\s+cached$/m);
    assert.match(table, /^user:\s+16 tokens\s+new$/m);
  });
  test('status bar: model, state, resident, pending, TTFT', () => {
    const v = statusBarView({ ...STATUS, pendingPrefillTokens: 120 }, true);
    assert.equal(v.text, '$(zap) gemma-3-270m-it-Q4_K_M · warm · 711 tok · +120 pending · TTFT 413 ms');
    assert.equal(statusBarView(undefined, false).text, '$(circle-slash) Contenox: off');
    const completion = { requests: 3, shown: 2, accepted: 1, partiallyAccepted: 0, typedThrough: 1,
      skippedBusy: 0, lastLatencyMs: 87.4, lastNewTokens: 9, lastReusedTokens: 800, lastPromptTokens: 809,
      lastContextTokens: 300, lastDecodeTokens: 4, mode: 'prefix', fim: false, residentBranches: { chat: 711, completion: 809 } };
    assert.equal(statusBarView({ ...STATUS, completion }, true).text,
      '$(zap) gemma-3-270m-it-Q4_K_M · warm · 711 tok · TTFT 413 ms · $(sparkle) 87 ms');
    assert.equal(statusBarView({ ...STATUS, state: 'error', error: 'boom' }, true).isError, true);
    assert.equal(shortModel(null), undefined);
  });
  test('errors: cancelled, coded, connection', () => {
    assert.equal(describeError({ code: -32800, message: 'x' }).cancelled, true);
    assert.equal(describeError({ code: -32602, message: 'Invalid params: /etc/passwd is outside the workspace' }).message,
      'Invalid params: /etc/passwd is outside the workspace');
    assert.match(describeError(new Error('Connection got disposed.')).message, /not running/);
  });
});
