import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import type * as UwsTypes from '@trufflesuite/uws-js-unofficial';

// uWebSockets.js is not on the npm registry under its own name. Try the official
// package first, then the unofficial builds, newest first. The trufflesuite
// package's entry point silently falls back to a pure-JS server when its binary fails to
// load, so its binary is required directly: a failure must stop the server, not slow it.
// uWS serves the management API only, behind the front (edge/front.ts), which parses every
// request first and ends TLS itself: the builds' HTTP parser and TLS flaws never see a visitor.
export type Uws = typeof UwsTypes;

const require = createRequire(import.meta.url);
const binary = `uws_${process.platform}_${process.arch}_${process.versions.modules}.node`;

// Newest first: a build that loads is used, so newer builds (which need a newer glibc) win
// wherever they load.
const CANDIDATES: { name: string; load: () => Uws }[] = [
  { name: 'uWebSockets.js', load: () => require('uWebSockets.js') as Uws },
  { name: '@btc-vision/uwebsockets.js', load: () => require('@btc-vision/uwebsockets.js') as Uws },
  { name: '@trufflesuite/uws-js-unofficial', load: () => require(`@trufflesuite/uws-js-unofficial/binaries/${binary}`) as Uws },
];

export interface LoadedUws {
  uws: Uws;
  from: string;
  /** The package's version, when its package.json can be read. */
  version: string | null;
}

function versionOf(name: string): string | null {
  try {
    return (require(`${name}/package.json`) as { version?: string }).version ?? null;
  } catch {
    // Packages with an `exports` map hide their package.json (@btc-vision/uwebsockets.js): read
    // the one beside the entry point, which is in the package's root for these builds.
    try {
      return (JSON.parse(readFileSync(join(dirname(require.resolve(name)), 'package.json'), 'utf8')) as { version?: string }).version ?? null;
    } catch {
      return null;
    }
  }
}

let loaded: LoadedUws | undefined;

export function loadUws(): LoadedUws {
  if (loaded) return loaded;
  const failures: string[] = [];
  for (const c of CANDIDATES) {
    try {
      const uws = c.load();
      if (typeof uws.App !== 'function') throw new Error('no App export');
      loaded = { uws, from: c.name, version: versionOf(c.name) };
      return loaded;
    } catch (err) {
      failures.push(`${c.name}: ${(err as Error).message.split('\n')[0]}`);
    }
  }
  throw new Error(`no native uWebSockets.js build loads on this machine (refusing the JS fallback):\n  ${failures.join('\n  ')}`);
}
