import { writeFixedCopy } from './uws-tls-fix.js';

// Run by `npm ci`/`npm install` (package.json "prepare"): writes the fixed uWebSockets.js copy
// that src/http/uws-loader.ts prefers. Never fails the install: burrowd then uses the stock build.
try {
  console.error(`burrow: ${writeFixedCopy(`uws_${process.platform}_${process.arch}_${process.versions.modules}.node`)}`);
} catch (err) {
  console.error(`burrow: the uWebSockets.js TLS read fix was not applied: ${(err as Error).message}`);
}
