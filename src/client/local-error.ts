// Why a visitor's request or connection got no answer from the local service, in words for the
// status screen and --json events ("connection refused by localhost:3000"): the client is the
// only one that knows, the visitor just sees 502 or 504.

/** `err` null: the local service took longer than `timeoutMs` to answer. */
export function describeLocalError(err: Error | null, target: string, timeoutMs?: number): string {
  if (err === null) return `no response from ${target} within ${timeoutMs !== undefined ? `${Math.round(timeoutMs / 100) / 10} s` : 'the time limit'}`;
  const code = errorCode(err);
  switch (code) {
    case 'ECONNREFUSED':
      return `connection refused by ${target}`;
    case 'ECONNRESET':
    case 'EPIPE':
    case 'UND_ERR_SOCKET':
      return `connection reset by ${target}`;
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return `${target}: host name not found`;
    case 'ETIMEDOUT':
    case 'UND_ERR_CONNECT_TIMEOUT':
      return `connecting to ${target} timed out`;
    case 'EHOSTUNREACH':
    case 'ENETUNREACH':
      return `${target} is unreachable`;
    default:
      if (code && /CERT|SELF_SIGNED|UNABLE_TO_VERIFY|ALTNAME/.test(code)) {
        return `${target}'s TLS certificate is not trusted (${code}); --upstream-insecure accepts a self-signed one`;
      }
      return `${target}: ${code ?? err.message}`;
  }
}

/** The system error code, also when wrapped (undici puts the socket's error in `cause`). */
function errorCode(err: Error): string | undefined {
  let e: unknown = err;
  for (let depth = 0; depth < 3 && e instanceof Error; depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && code !== 'UND_ERR_SOCKET') return code;
    if (typeof code === 'string' && !(e.cause instanceof Error)) return code;
    e = e.cause;
  }
  return undefined;
}
