import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { readFileSync } from 'node:fs';
import { applyFix, fixPaths, sha256, TLS_READ_FIXES } from '../../src/http/uws-tls-fix.js';
import { loadUws, tlsReadFlaw } from '../../src/http/uws-loader.js';

// The uSockets TLS read fix (src/http/uws-tls-fix.ts) is applied to exactly the build it was
// made for, and `npm ci` leaves burrowd loading the fixed copy. What the fix does for traffic
// is tested end to end in tls.test.ts ("bulk over TLS").

const binary = `uws_${process.platform}_${process.arch}_${process.versions.modules}.node`;
const fix = TLS_READ_FIXES[binary];

test('this machine (linux-x64, Node 20) has a fix for its build, and npm ci made burrow load the fixed copy', () => {
  assert.ok(fix, `no fix for ${binary}`);
  const loaded = loadUws();
  assert.is(loaded.from, '@trufflesuite/uws-js-unofficial');
  assert.ok(loaded.tlsReadFixed, 'the stock binary was loaded: run npm ci');
  assert.is(tlsReadFlaw(loaded), null);
});

test('the fix turns the stock binary into the fixed one, changing 7 bytes at the store it removes', () => {
  const stock = readFileSync(fixPaths(binary).stock);
  const fixed = applyFix(fix!, stock);
  assert.instance(fixed, Buffer);
  const out = fixed as Buffer;
  assert.is(sha256(out), fix!.fixedSha256);
  const changed = [...out.keys()].filter((i) => out[i] !== stock[i]);
  assert.ok(changed.length > 0 && changed.length <= 7 && changed.every((i) => i >= fix!.offset && i < fix!.offset + 7), String(changed));
});

test('another build is never patched blindly: a different binary, or the expected bytes elsewhere, is refused', () => {
  const stock = readFileSync(fixPaths(binary).stock);
  const other = Buffer.from(stock);
  other[100] = other[100]! ^ 0xff;
  assert.type(applyFix(fix!, other), 'string');
  assert.match(applyFix(fix!, other) as string, 'not the build');
  // Same bytes, a fix entry pointing elsewhere (as a wrong table entry would).
  assert.match(applyFix({ ...fix!, offset: fix!.offset + 1 }, stock) as string, 'not where the fix expects');
});

test.run();
