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
  if (code === 'ERR_TLS_CERT_ALTNAME_INVALID') return 'its certificate is for another name (name mismatch)';
  if (code === 'CERT_HAS_EXPIRED') return 'its certificate has expired';
  return 'its certificate is not valid yet';
}

