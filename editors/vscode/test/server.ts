/**
 * Test harness: spawn the real Python server (CONTENOX_LSP_COMMAND, default `contenox-lsp` on
 * PATH) and drive it with vscode-languageserver-protocol over stdio.
 */
import * as cp from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import {
  createProtocolConnection,
  ProgressType,
  StreamMessageReader,
  StreamMessageWriter,
  type ProtocolConnection,
} from 'vscode-languageserver-protocol/node';
import type { LspClient } from '../src/controller';
import { which } from '../src/settings';

export function serverCommand(): string[] {
  const raw = process.env.CONTENOX_LSP_COMMAND?.trim();
  const cmd = raw ? raw.split(/\s+/) : ['contenox-lsp'];
  if (!which(cmd[0], process.env)) {
    throw new Error(
      `The Contenox server "${cmd[0]}" was not found. Install the project (pip install -e .) and ` +
        'activate its virtual environment, or set CONTENOX_LSP_COMMAND to the server command ' +
        '(e.g. "/path/to/.venv/bin/contenox-lsp").',
    );
  }
  return cmd;
}

/** A temporary workspace with a couple of small Python files. */
export function makeWorkspace(): string {
  const dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'contenox-vscode-')));
  fs.writeFileSync(path.join(dir, 'app.py'), [
    'from util import clamp',
    '',
    '',
    'def add(a, b):',
    '    return a + b',
    '',
    '',
    'class Greeter:',
    '    def hello(self, name):',
    '        return "hi " + name',
    '',
    '',
    'def scaled(x):',
    '    return clamp(x * 2, 0, 10)',
    '',
  ].join('\n'));
  fs.writeFileSync(path.join(dir, 'util.py'), [
    'def clamp(x, lo, hi):',
    '    """Clamp x into [lo, hi]."""',
    '    return max(lo, min(hi, x))',
    '',
  ].join('\n'));
  return dir;
}

export function fileUri(p: string): string {
  return 'file://' + p.split(path.sep).map(encodeURIComponent).join('/');
}

export interface RunningServer {
  proc: cp.ChildProcessWithoutNullStreams;
  conn: ProtocolConnection;
  stderr: string[];
  messages: { type: number; message: string }[];
  exited: Promise<number | null>;
  /** An LspClient (the extension's client interface) over this connection. */
  client: LspClient;
  logFile: string;
}

export function startServer(logFile: string): RunningServer {
  const [cmd, ...args] = serverCommand();
  const proc = cp.spawn(cmd, args, { stdio: ['pipe', 'pipe', 'pipe'] });
  const stderr: string[] = [];
  fs.mkdirSync(path.dirname(logFile), { recursive: true });
  const log = fs.createWriteStream(logFile);
  proc.stderr.on('data', (d: Buffer) => {
    stderr.push(d.toString());
    log.write(d);
  });
  const exited = new Promise<number | null>((resolve) => proc.on('exit', (code) => resolve(code)));
  const conn = createProtocolConnection(new StreamMessageReader(proc.stdout), new StreamMessageWriter(proc.stdin));
  const messages: { type: number; message: string }[] = [];
  conn.onNotification('window/showMessage', (p: { type: number; message: string }) => { messages.push(p); });
  conn.onNotification('window/logMessage', () => undefined);
  conn.onRequest('window/workDoneProgress/create', () => null);
  conn.onRequest('client/registerCapability', () => null);
  conn.onRequest('workspace/applyEdit', () => ({ applied: true }));
  conn.onRequest('window/showMessageRequest', () => null);
  conn.listen();
  const partial = new ProgressType<unknown>();
  let running = true;
  proc.on('exit', () => { running = false; });
  const client: LspClient = {
    start: async () => undefined,
    stop: async () => undefined,
    isRunning: () => running,
    sendRequest: <R>(method: string, params: unknown, token?: any) =>
      (token ? conn.sendRequest(method, params, token) : conn.sendRequest(method, params)) as Promise<R>,
    sendNotification: (method: string, params: unknown) => conn.sendNotification(method, params),
    onProgress: (token, handler) => conn.onProgress(partial, token, handler),
    onDidChangeState: () => ({ dispose() {} }),
  };
  return { proc, conn, stderr, messages, exited, client, logFile };
}

export async function initialize(server: RunningServer, workspace: string, initializationOptions: unknown) {
  const uri = fileUri(workspace);
  const result = await server.conn.sendRequest('initialize', {
    processId: process.pid,
    clientInfo: { name: 'contenox-vscode-tests' },
    rootUri: uri,
    workspaceFolders: [{ uri, name: path.basename(workspace) }],
    initializationOptions,
    capabilities: {
      general: { positionEncodings: ['utf-16'] },
      window: { workDoneProgress: true },
      workspace: {
        workspaceFolders: true,
        applyEdit: true,
        didChangeWatchedFiles: { dynamicRegistration: true },
        executeCommand: { dynamicRegistration: false },
      },
      textDocument: {
        synchronization: { dynamicRegistration: false, didSave: true },
        codeAction: {
          codeActionLiteralSupport: { codeActionKind: { valueSet: ['', 'quickfix', 'refactor', 'source'] } },
        },
      },
    },
  });
  await server.conn.sendNotification('initialized', {});
  return result as { capabilities: any; serverInfo?: { name: string } };
}

export function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout>;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise<T>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms / 1000}s`)), ms);
    }),
  ]);
}
