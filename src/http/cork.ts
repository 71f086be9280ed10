// Which socket holds uWS's cork, and a place for writes that must wait until none does.
//
// uWS corks the socket whose callback is running (a request, a body chunk, a WebSocket
// message) and lets no other socket cork until that callback returns: `other.cork(fn)` then
// runs `fn` uncorked, and every writeStatus, writeHeader, write and send becomes a send(2) of
// its own. Measured with strace on a tunnelled 14-byte GET answered from inside the control
// WebSocket's message handler: about 20 sendto calls per request. Code that writes to other
// sockets from inside such a callback asks `corkHeldByOther(socket)` and, when it is, hands
// the write to `afterCallbacks`, which runs once this loop turn's socket callbacks are over,
// where each socket can cork: one syscall per socket and turn.
//
// With TLS there is a second reason to wait. uSockets decrypts each read into one buffer per
// loop and, when a read yields 512 KiB of plaintext, hands it to the callback in pieces while
// ciphertext of that read is still unparsed; a write to any TLS socket meanwhile resets the
// loop's shared read state, the rest of the read is lost and that connection's TLS stream
// breaks (bulk responses over a wss control connection ended both ends with 1006). So on a
// TLS listener a control connection's frames are handled after its read callback (`tlsSockets`),
// and visitor callbacks leave their writes toward the tunnel to `afterCallbacks`. uWS's own
// write at the end of a piece (it sends what backpressure held back) is made harmless by the
// fixed binary (uws-tls-fix.ts); ours wait regardless, since a write to another socket in the
// middle of a read also leaves uSockets' current socket pointing at the wrong one.

let holder: object | null = null;
let tls = false;

/** The shard serves TLS: frames read on a control connection are handled after its callback. */
export function setTlsSockets(on: boolean): void {
  tls = on;
}
export function tlsSockets(): boolean {
  return tls;
}

/** Runs `fn` as the body of a uWS callback of `socket` (which uWS keeps corked meanwhile). */
export function insideCallbackOf<T>(socket: object, fn: () => T): T {
  const outer = holder;
  holder = socket;
  try {
    return fn();
  } finally {
    holder = outer;
  }
}

/** True when a write to `socket` now would go out uncorked: another socket's callback runs. */
export function corkHeldByOther(socket: object): boolean {
  return holder !== null && holder !== socket;
}

const waiting: Array<() => void> = [];
let scheduled = false;

/** Runs `fn` after the socket callbacks of this loop turn (setImmediate: libuv's check phase). */
export function afterCallbacks(fn: () => void): void {
  waiting.push(fn);
  if (scheduled) return;
  scheduled = true;
  setImmediate(runWaiting);
}

function runWaiting(): void {
  scheduled = false;
  for (const fn of waiting.splice(0)) fn();
}
