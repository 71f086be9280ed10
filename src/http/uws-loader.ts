import { createRequire } from 'node:module';
import type * as UwsTypes from '@trufflesuite/uws-js-unofficial';

// uWebSockets.js is not on the npm registry under its own name. Try the official
// package first, then the builds that load natively here (decisions.md). The trufflesuite
// package's entry point silently falls back to a pure-JS server when its binary fails to
// load, so its binary is required directly: a failure must stop the server, not slow it.
export type Uws = typeof UwsTypes;

const require = createRequire(import.meta.url);
const binary = `uws_${process.platform}_${process.arch}_${process.versions.modules}.node`;

const CANDIDATES: { name: string; load: () => Uws }[] = [
  { name: 'uWebSockets.js', load: () => require('uWebSockets.js') as Uws },
  { name: '@trufflesuite/uws-js-unofficial', load: () => require(`@trufflesuite/uws-js-unofficial/binaries/${binary}`) as Uws },
  { name: '@btc-vision/uwebsockets.js', load: () => require('@btc-vision/uwebsockets.js') as Uws },
];

export interface LoadedUws {
  uws: Uws;
  from: string;
}

let loaded: LoadedUws | undefined;

export function loadUws(): LoadedUws {
  if (loaded) return loaded;
  const failures: string[] = [];
  for (const c of CANDIDATES) {
    try {
      const uws = c.load();
      if (typeof uws.App !== 'function') throw new Error('no App export');
      loaded = { uws, from: c.name };
      return loaded;
    } catch (err) {
      failures.push(`${c.name}: ${(err as Error).message.split('\n')[0]}`);
    }
  }
  throw new Error(`no native uWebSockets.js build loads on this machine (refusing the JS fallback):\n  ${failures.join('\n  ')}`);
}
