/**
 * Settings → how to launch the server and which initializationOptions to send.
 * Pure functions (no `vscode` import) so they are unit-testable in plain Node.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

export interface Settings {
  /** `contenox.server.path`: the server executable ('' = `contenox-lsp` on PATH). */
  serverPath: string;
  /** `contenox.server.pythonPath`: run `<python> -m contenox_lsp` instead. */
  pythonPath: string;
  /** `contenox.server.args`: extra arguments for the server. */
  serverArgs: string[];
  profile: string;
  model: string;
  debounceMs: number;
  prefillOnIdle: boolean;
  maxTokens: number;
  logLevel: string;
  /** How often the status bar asks `contenox/status` (ms; 0 = only after requests). */
  statusRefreshMs: number;
}

export const DEFAULT_SETTINGS: Settings = {
  serverPath: '',
  pythonPath: '',
  serverArgs: [],
  profile: '',
  model: '',
  debounceMs: 300,
  prefillOnIdle: true,
  maxTokens: 256,
  logLevel: 'info',
  statusRefreshMs: 2000,
};

/** Read settings through a `get(key, default)` accessor (WorkspaceConfiguration-shaped). */
export function readSettings(get: <T>(key: string, fallback: T) => T): Settings {
  const d = DEFAULT_SETTINGS;
  return {
    serverPath: get('server.path', d.serverPath),
    pythonPath: get('server.pythonPath', d.pythonPath),
    serverArgs: get('server.args', d.serverArgs),
    profile: get('profile', d.profile),
    model: get('model', d.model),
    debounceMs: get('debounceMs', d.debounceMs),
    prefillOnIdle: get('prefillOnIdle', d.prefillOnIdle),
    maxTokens: get('maxTokens', d.maxTokens),
    logLevel: get('logLevel', d.logLevel),
    statusRefreshMs: get('statusRefreshMs', d.statusRefreshMs),
  };
}

export type LaunchSource = 'server.path' | 'server.pythonPath' | 'CONTENOX_LSP_COMMAND' | 'PATH';

export interface LaunchSpec {
  command: string;
  args: string[];
  cwd: string | undefined;
  /** Which setting chose the command (for error messages). */
  source: LaunchSource;
  initializationOptions: Record<string, unknown>;
}

/** `${workspaceFolder}`, `${userHome}` and a leading `~`. */
export function expandPath(value: string, workspaceFolder: string | undefined): string {
  let v = value.trim();
  if (v === '~' || v.startsWith('~/')) v = os.homedir() + v.slice(1);
  v = v.replace(/\$\{userHome\}/g, os.homedir());
  if (workspaceFolder) v = v.replace(/\$\{workspaceFolder\}/g, workspaceFolder);
  return v;
}

/**
 * The command line of the server. Precedence: `contenox.server.path`, then
 * `contenox.server.pythonPath` (`python -m contenox_lsp`), then the `CONTENOX_LSP_COMMAND`
 * environment variable (whitespace-separated), then `contenox-lsp` on PATH.
 */
export function resolveLaunch(
  s: Settings,
  env: Record<string, string | undefined>,
  workspaceFolder: string | undefined,
): LaunchSpec {
  let command: string;
  let args: string[] = [];
  let source: LaunchSource;
  if (s.serverPath.trim()) {
    command = expandPath(s.serverPath, workspaceFolder);
    source = 'server.path';
  } else if (s.pythonPath.trim()) {
    command = expandPath(s.pythonPath, workspaceFolder);
    args = ['-m', 'contenox_lsp'];
    source = 'server.pythonPath';
  } else if (env.CONTENOX_LSP_COMMAND && env.CONTENOX_LSP_COMMAND.trim()) {
    const parts = env.CONTENOX_LSP_COMMAND.trim().split(/\s+/);
    command = parts[0];
    args = parts.slice(1);
    source = 'CONTENOX_LSP_COMMAND';
  } else {
    command = 'contenox-lsp';
    source = 'PATH';
  }
  args = args.concat(s.serverArgs ?? []);
  return {
    command,
    args,
    cwd: workspaceFolder,
    source,
    initializationOptions: initializationOptions(s, workspaceFolder),
  };
}

/**
 * The server's initializationOptions (contenox_lsp/options.py). Values are passed through
 * as set; the server validates them and reports bad ones with window/showMessage.
 */
export function initializationOptions(
  s: Settings,
  workspaceFolder: string | undefined,
): Record<string, unknown> {
  const opts: Record<string, unknown> = {
    debounceMs: s.debounceMs,
    prefillOnIdle: s.prefillOnIdle,
    maxTokens: s.maxTokens,
    logLevel: s.logLevel,
  };
  if (s.profile.trim()) opts.profile = expandPath(s.profile, workspaceFolder);
  if (s.model.trim()) opts.model = expandPath(s.model, workspaceFolder);
  return opts;
}

/** The executable a command resolves to (PATH lookup for bare names), or undefined. */
export function which(
  command: string,
  env: Record<string, string | undefined>,
  cwd?: string,
): string | undefined {
  const isExecutable = (file: string): boolean => {
    try {
      const st = fs.statSync(file);
      if (!st.isFile()) return false;
      if (process.platform === 'win32') return true;
      fs.accessSync(file, fs.constants.X_OK);
      return true;
    } catch {
      return false;
    }
  };
  if (command.includes('/') || command.includes(path.sep)) {
    const file = path.isAbsolute(command) ? command : path.resolve(cwd ?? process.cwd(), command);
    return isExecutable(file) ? file : undefined;
  }
  const exts = process.platform === 'win32'
    ? (env.PATHEXT ?? '.EXE;.CMD;.BAT').split(';').concat([''])
    : [''];
  for (const dir of (env.PATH ?? '').split(path.delimiter)) {
    if (!dir) continue;
    for (const ext of exts) {
      const file = path.join(dir, command + ext);
      if (isExecutable(file)) return file;
    }
  }
  return undefined;
}

/** An actionable message for a server command that cannot be found. */
export function missingServerMessage(spec: LaunchSpec): string {
  switch (spec.source) {
    case 'server.path':
      return `Contenox: the language server "${spec.command}" (setting contenox.server.path) ` +
        'does not exist or is not executable. Fix the setting, or clear it to use ' +
        '`contenox-lsp` from PATH.';
    case 'server.pythonPath':
      return `Contenox: the Python interpreter "${spec.command}" (setting ` +
        'contenox.server.pythonPath) does not exist or is not executable. Point it at the ' +
        'interpreter of the environment where contenox-lsp is installed.';
    case 'CONTENOX_LSP_COMMAND':
      return `Contenox: "${spec.command}" from the CONTENOX_LSP_COMMAND environment variable ` +
        'was not found. Fix the variable or set contenox.server.path.';
    default:
      return 'Contenox: the language server `contenox-lsp` was not found on PATH. Install it ' +
        '(`pip install contenox-lsp`, or start VS Code from the activated virtual environment), ' +
        'or set contenox.server.path to the executable (or contenox.server.pythonPath to a ' +
        'Python interpreter that has it).';
  }
}
