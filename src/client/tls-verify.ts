// Certificate verification failures in words (the CLI's messages and the tunnel client's refusal).

const UNKNOWN_CA = new Set([
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE', 'UNABLE_TO_GET_ISSUER_CERT', 'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'SELF_SIGNED_CERT_IN_CHAIN', 'DEPTH_ZERO_SELF_SIGNED_CERT', 'CERT_UNTRUSTED', 'CERT_SIGNATURE_FAILURE',
]);

/** Walks an error's cause chain for a certificate verification code. */
function tlsCode(err: unknown): string | null {
  for (let e = err as { code?: unknown; cause?: unknown } | undefined, i = 0; e && i < 5; e = e.cause as typeof e, i++) {
    const code = typeof e.code === 'string' ? e.code : '';
    if (UNKNOWN_CA.has(code) || code === 'ERR_TLS_CERT_ALTNAME_INVALID' || code === 'CERT_HAS_EXPIRED' || code === 'CERT_NOT_YET_VALID') return code;
  }
  return null;
}

/** What failed, in words, when `err` is a certificate verification failure; else null. */
export function verificationProblem(err: unknown): string | null {
  const code = tlsCode(err);
  if (code === null) return null;
  if (UNKNOWN_CA.has(code)) return `its certificate is signed by an unknown CA (${code})`;
  if (code === 'ERR_TLS_CERT_ALTNAME_INVALID') {
    const names = certificateNames(err);
    return names.length ? `its certificate is for ${names.join(', ')}, not ${hostOf(err) ?? 'this name'} (name mismatch)` : 'its certificate is for another name (name mismatch)';
  }
  if (code === 'CERT_HAS_EXPIRED') return 'its certificate has expired';
  return 'its certificate is not valid yet';
}


/** Most names a mismatch lists: a certificate for hundreds of names is summarised. */
const MAX_NAMES = 10;

/** The peer certificate a name-mismatch error carries (Node sets `cert` and `host` on it). */
function mismatchError(err: unknown): { cert?: { subjectaltname?: unknown; subject?: { CN?: unknown } }; host?: unknown } | null {
  for (let e = err as { code?: unknown; cause?: unknown } | undefined, i = 0; e && i < 5; e = e.cause as typeof e, i++) {
    if (e.code === 'ERR_TLS_CERT_ALTNAME_INVALID') return e as never;
  }
  return null;
}

/** The DNS names and IP addresses the server's certificate holds (its CN when it has no SAN). */
function certificateNames(err: unknown): string[] {
  const cert = mismatchError(err)?.cert;
  if (!cert) return [];
  const san = typeof cert.subjectaltname === 'string' ? cert.subjectaltname : '';
  let names = san
    .split(', ')
    .map((entry) => /^(?:DNS|IP Address):(.+)$/.exec(entry)?.[1])
    .filter((n): n is string => n !== undefined);
  if (names.length === 0 && typeof cert.subject?.CN === 'string') names = [cert.subject.CN];
  // A peer's text: printable characters only, each name bounded.
  names = names.map((n) => n.replace(/[^\x21-\x7e]/g, '?').slice(0, 253));
  return names.length > MAX_NAMES ? [...names.slice(0, MAX_NAMES), `… (${names.length} names)`] : names;
}

function hostOf(err: unknown): string | null {
  const host = mismatchError(err)?.host;
  return typeof host === 'string' && host ? host : null;
}
