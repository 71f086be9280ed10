// One line for the top of a CI run: the Node version, the C library, and the uWebSockets.js
// build burrowd loads on this machine (src/http/uws-loader.ts, newest build first). Needs the
// compiled dist/ (npm ci builds it).
import { loadUws } from '../dist/src/http/uws-loader.js';

const glibc = process.report.getReport().header.glibcVersionRuntime;
let uws;
try {
  const l = loadUws();
  uws = `${l.from} ${l.version ?? '(version unknown)'}`;
} catch (err) {
  uws = `none loads (${err.message.split('\n').slice(1).map((l) => l.trim()).join('; ')})`;
}
console.log(`platform: Node ${process.version} ${process.platform}-${process.arch}, glibc ${glibc ?? 'none (not glibc)'}, uWS ${uws}`);
