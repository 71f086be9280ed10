import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import type * as UwsTypes from '@trufflesuite/uws-js-unofficial';
import { verifiedFixedCopy } from './uws-tls-fix.js';

// uWebSockets.js is not on the npm registry under its own name. Try the official
// package first, then the unofficial builds, newest first. The trufflesuite
// package's entry point silently falls back to a pure-JS server when its binary fails to
// load, so its binary is required directly: a failure must stop the server, not slow it. Its
// copy with the TLS read fix (src/http/uws-tls-fix.ts), written by `npm ci`, comes first.
export type Uws = typeof UwsTypes;

const require = createRequire(import.meta.url);
const binary = `uws_${process.platform}_${process.arch}_${process.versions.modules}.node`;

// Newest first: a build that loads is used, so newer builds (which need a newer glibc) win
// wherever they load.
const CANDIDATES: { name: string; load: () => { uws: Uws; tlsReadFixed: boolean } }[] = [
  { name: 'uWebSockets.js', load: () => ({ uws: require('uWebSockets.js') as Uws, tlsReadFixed: false }) },
  { name: '@btc-vision/uwebsockets.js', load: () => ({ uws: require('@btc-vision/uwebsockets.js') as Uws, tlsReadFixed: false }) },
  {
    name: '@trufflesuite/uws-js-unofficial',
    load: () => {
      const fixed = verifiedFixedCopy(binary);
      if (fixed) return { uws: require(fixed) as Uws, tlsReadFixed: true };
      return { uws: require(`@trufflesuite/uws-js-unofficial/binaries/${binary}`) as Uws, tlsReadFixed: false };
    },
  },
];

export interface LoadedUws {
  uws: Uws;
  from: string;
  /** The package's version, when its package.json can be read. */
  version: string | null;
  /** The copy with the uSockets TLS read fix was loaded (src/http/uws-tls-fix.ts). */
  tlsReadFixed: boolean;
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

/**
 * A known flaw of the loaded build that operators must hear about, or null. uWebSockets.js
 * 20.30 misparses chunk extensions (`5;a=b`): the bytes of a following request on the same
 * connection become body of the first (and reach a tunnel's local service as such). The newer
 * build the loader also tries (@btc-vision/uwebsockets.js 20.57) needs glibc 2.38.
 */
export function knownBuildFlaw(l: LoadedUws): string | null {
  if (l.from === '@trufflesuite/uws-js-unofficial' && (l.version ?? '').startsWith('20.30.')) {
    return `uWebSockets.js ${l.version} (${l.from}) misparses chunk extensions in request bodies ("5;a=b"): ` +
      'bytes of a following request on the same connection become body of the first. Install a newer ' +
      'build where glibc allows (@btc-vision/uwebsockets.js 20.57 needs glibc 2.38); see README "Deployment notes".';
  }
  return null;
}

/** The TLS defect of a build without the fix, or null: said at start-up when TLS is on. */
export function tlsReadFlaw(l: LoadedUws): string | null {
  if (l.tlsReadFixed) return null;
  return `uWebSockets.js ${l.version ?? ''} (${l.from}) is not the copy with the TLS read fix: a TLS connection that ` +
    'receives a large read while it has data waiting to go out (a tunnel carrying large bodies both ways at once) ' +
    'can lose its stream and close. Run `npm ci` on linux-x64 with Node 20 to get the fixed copy; see README "Deploying on an edge".';
}

let loaded: LoadedUws | undefined;

export function loadUws(): LoadedUws {
  if (loaded) return loaded;
  const failures: string[] = [];
  for (const c of CANDIDATES) {
    try {
      const { uws, tlsReadFixed } = c.load();
      if (typeof uws.App !== 'function') throw new Error('no App export');
      loaded = { uws, from: c.name, version: versionOf(c.name), tlsReadFixed };
      return loaded;
    } catch (err) {
      failures.push(`${c.name}: ${(err as Error).message.split('\n')[0]}`);
    }
  }
  throw new Error(`no native uWebSockets.js build loads on this machine (refusing the JS fallback):\n  ${failures.join('\n  ')}`);
}
