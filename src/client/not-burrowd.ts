// Telling burrowd's answers from another server's. burrowd answers every API, login and tunnel
// request with JSON (problem+json for errors), so an answer with a body of any other type comes
// from something else at that address: a web server, a proxy's error page, a captive portal.
// Its body is never shown (an HTML page on a terminal helps no one), and nothing it says about
// keys or logins is taken as burrowd's word.

/** The media type alone, lower case, shortened and limited to token characters (it is a peer's). */
function mediaType(contentType: string | null | undefined): string {
  const t = (contentType ?? '').split(';')[0]!.trim().toLowerCase();
  return /^[a-z0-9!#$&^_.+-]+\/[a-z0-9!#$&^_.+-]+$/.test(t) ? t.slice(0, 80) : '';
}

/** True for application/json, application/problem+json and other +json types. */
export function isJsonType(contentType: string | null | undefined): boolean {
  const t = mediaType(contentType);
  return t === 'application/json' || t.endsWith('+json');
}

/**
 * A 502/503/504 page from a proxy is what a restarting burrowd behind nginx looks like: worth
 * retrying, unlike any other non-burrowd answer.
 */
export function isProxyUnavailable(status: number): boolean {
  return status === 502 || status === 503 || status === 504;
}

/** "this is not a burrowd server (it answered 404 text/html to GET /api/v1/me)" */
export function notBurrowdMessage(status: number, contentType: string | null | undefined, method: string, path: string): string {
  const what = `${status} ${mediaType(contentType) || 'without a content type'} to ${method} ${path}`;
  return isProxyUnavailable(status)
    ? `no answer from burrowd: something in front of it answered ${what} (a proxy whose burrowd is down or restarting?)`
    : `this is not a burrowd server (it answered ${what})`;
}
