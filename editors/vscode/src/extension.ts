/** VS Code entry point: the real `vscode` module and `vscode-languageclient` wired into the controller. */
import * as readline from 'node:readline';
import * as vscode from 'vscode';
import {
  CloseAction,
  ErrorAction,
  LanguageClient,
  ProgressType,
  State,
  type LanguageClientOptions,
  type ServerOptions,
} from 'vscode-languageclient/node';
import { activateWith, type ClientHooks, type Contenox, type LspClient } from './controller';
import type { LaunchSpec } from './settings';

let instance: Contenox | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<Contenox> {
  instance = await activateWith({ vscode, createClient, env: process.env }, context);
  return instance;
}

export async function deactivate(): Promise<void> {
  const c = instance;
  instance = undefined;
  if (c) {
    await c.stop();
    c.dispose();
  }
}

/** Restart at most this many times within RESTART_WINDOW_MS before giving up. */
const MAX_RESTARTS = 2;
const RESTART_WINDOW_MS = 3 * 60_000;
/** Lines of the server's stderr kept for error messages. */
const STDERR_LINES = 20;

function createClient(spec: LaunchSpec, hooks: ClientHooks): LspClient {
  // No `transport`: with TransportKind.stdio the client would append `--stdio` to the
  // arguments, which `contenox-lsp` does not take; without it, it still talks over stdio.
  const serverOptions: ServerOptions = {
    command: spec.command,
    args: spec.args,
    options: { cwd: spec.cwd, env: process.env },
  };
  const stderrTail: string[] = [];
  let everRunning = false;
  const restarts: number[] = [];
  const clientOptions: LanguageClientOptions = {
    documentSelector: hooks.documentSelector,
    middleware: {
      // Ghost text comes from the language client's own inline-completion feature (the
      // server advertises inlineCompletionProvider); this setting turns it off.
      provideInlineCompletionItems: (document, position, context, token, next) =>
        vscode.workspace.getConfiguration('contenox').get<boolean>('inlineCompletion.enabled', true)
          ? next(document, position, context, token)
          : undefined,
    },
    initializationOptions: spec.initializationOptions,
    outputChannel: hooks.output,
    stdioOptions: {
      stdout: (input, output) => {
        readline.createInterface({ input, crlfDelay: Infinity, terminal: false }).on('line', (l) => output.info(l));
      },
      stderr: (input, output) => {
        readline.createInterface({ input, crlfDelay: Infinity, terminal: false }).on('line', (l) => {
          output.appendLine(l);
          if (l.trim()) {
            stderrTail.push(l);
            if (stderrTail.length > STDERR_LINES) stderrTail.shift();
          }
        });
      },
    },
    errorHandler: {
      error: () => ({ action: ErrorAction.Continue }),
      closed: () => {
        // Dying before it ever ran is a start failure: start() rejects and the controller
        // reports it once, with the server's last stderr line.
        if (!everRunning) return { action: CloseAction.DoNotRestart, handled: true };
        const now = Date.now();
        while (restarts.length && now - restarts[0] > RESTART_WINDOW_MS) restarts.shift();
        if (restarts.length < MAX_RESTARTS) {
          restarts.push(now);
          hooks.output.appendLine('[contenox] the language server exited; restarting it');
          return { action: CloseAction.Restart, handled: true };
        }
        const last = stderrTail[stderrTail.length - 1];
        hooks.onFatal(
          `Contenox: the language server "${spec.command}" stopped ${MAX_RESTARTS + 1} times in a ` +
            `few minutes and will not be restarted${last ? ` (last error: ${last.trim()})` : ''}. ` +
            'Its log is in the Contenox output.',
        );
        return { action: CloseAction.DoNotRestart, handled: true };
      },
    },
    // A failed initialize rejects start(); the controller reports it.
    initializationFailedHandler: () => false,
  };
  const client = new LanguageClient('contenox', 'Contenox', serverOptions, clientOptions);
  const partial = new ProgressType<unknown>();
  return {
    start: () => client.start(),
    stop: async () => {
      if (client.state !== State.Stopped) await client.stop();
    },
    isRunning: () => client.isRunning(),
    sendRequest: <R>(method: string, params: unknown, token?: vscode.CancellationToken) =>
      token
        ? client.sendRequest<R>(method, params, token)
        : client.sendRequest<R>(method, params),
    sendNotification: (method: string, params: unknown) => client.sendNotification(method, params),
    onProgress: (token, handler) => client.onProgress(partial, token, handler),
    onDidChangeState: (listener) =>
      client.onDidChangeState((e) => {
        if (e.newState === State.Running) everRunning = true;
        listener(e.newState === State.Running);
      }),
    lastError: () => stderrTail[stderrTail.length - 1]?.trim(),
  };
}
