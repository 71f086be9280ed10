// Leaving gracefully: a tunnel the client closed (Close) gets no new stream once the server has
// heard it, but a stream the server opened just before is still on its way. So a connection
// ends only once it has carried no stream for QUIET_MS.

/** How long no stream must be open before a closed tunnel's connection ends. */
const QUIET_MS = 250;

/** Waits until `idle()` has held for QUIET_MS, or `maxMs` passed. */
export async function settled(idle: () => boolean, maxMs: number): Promise<void> {
  const until = Date.now() + maxMs;
  let quietSince = idle() ? Date.now() : 0;
  while (Date.now() < until && !(quietSince && Date.now() - quietSince >= QUIET_MS)) {
    await new Promise((r) => setTimeout(r, 20));
    if (!idle()) quietSince = 0;
    else if (!quietSince) quietSince = Date.now();
  }
}
