// Build: `node esbuild.mjs` bundles the extension into dist/extension.js;
// `node esbuild.mjs --tests` compiles test/*.test.ts into out/test/ for `node --test`.
import * as esbuild from 'esbuild';
import { readdirSync, rmSync } from 'node:fs';

const production = process.argv.includes('--production');
const tests = process.argv.includes('--tests');

if (tests) {
  rmSync('out', { recursive: true, force: true });
  const entryPoints = readdirSync('test').filter((f) => f.endsWith('.test.ts')).map((f) => `test/${f}`);
  await esbuild.build({
    entryPoints,
    outdir: 'out/test',
    bundle: true,
    platform: 'node',
    format: 'cjs',
    target: 'node20',
    sourcemap: 'inline',
    packages: 'external',
    external: ['vscode'],
    logLevel: 'warning',
  });
} else {
  await esbuild.build({
    entryPoints: ['src/extension.ts'],
    outfile: 'dist/extension.js',
    bundle: true,
    platform: 'node',
    format: 'cjs',
    target: 'node20',
    external: ['vscode'],
    minify: production,
    sourcemap: !production,
    logLevel: 'warning',
  });
}
