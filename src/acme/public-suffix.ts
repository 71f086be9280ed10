// A small embedded list of public suffixes: the registered domain of a name (for the CA's
// per-domain limit) and the names a user may not claim (a suffix itself). It covers the
// generic TLDs and the multi-label suffixes most often met; a name under a suffix it lacks
// counts by its last two labels, which can only make the per-domain bound stricter.

const MULTI_LABEL = new Set([
  'co.uk', 'org.uk', 'me.uk', 'ltd.uk', 'plc.uk', 'net.uk', 'ac.uk', 'gov.uk', 'sch.uk',
  'com.au', 'net.au', 'org.au', 'edu.au', 'gov.au', 'id.au', 'asn.au',
  'co.nz', 'org.nz', 'net.nz', 'ac.nz', 'govt.nz', 'geek.nz',
  'co.jp', 'ne.jp', 'or.jp', 'ac.jp', 'go.jp', 'gr.jp', 'ed.jp', 'ad.jp',
  'com.br', 'net.br', 'org.br', 'gov.br', 'edu.br',
  'com.cn', 'net.cn', 'org.cn', 'gov.cn', 'edu.cn',
  'co.in', 'net.in', 'org.in', 'firm.in', 'gen.in', 'ind.in',
  'co.za', 'org.za', 'web.za', 'gov.za',
  'com.mx', 'org.mx', 'gob.mx', 'com.ar', 'com.tr', 'org.tr', 'com.tw', 'org.tw', 'com.hk', 'org.hk',
  'com.sg', 'org.sg', 'edu.sg', 'co.kr', 'or.kr', 'co.il', 'org.il', 'co.id', 'or.id', 'com.my', 'com.ph', 'com.vn',
  'com.ua', 'org.ua', 'com.pl', 'net.pl', 'org.pl', 'co.at', 'or.at', 'com.es', 'org.es', 'com.pt', 'co.it',
  // Hosting platforms whose customers each own a subdomain (the PSL's "private" section).
  'github.io', 'gitlab.io', 'herokuapp.com', 'netlify.app', 'vercel.app', 'pages.dev', 'workers.dev',
  'appspot.com', 'azurewebsites.net', 'cloudfront.net', 'amazonaws.com', 'blogspot.com', 'fly.dev', 'onrender.com',
  'ngrok.io', 'ngrok.app', 'loca.lt', 'trycloudflare.com', 'duckdns.org', 'no-ip.org', 'dyndns.org', 'firebaseapp.com', 'web.app',
]);

/** The public suffix of `name` (lower case, no trailing dot): a listed multi-label one, else its last label. */
export function publicSuffix(name: string): string {
  const labels = name.split('.');
  for (let i = Math.max(0, labels.length - 3); i < labels.length - 1; i++) {
    const tail = labels.slice(i).join('.');
    if (MULTI_LABEL.has(tail)) return tail;
  }
  return labels[labels.length - 1]!;
}

export function isPublicSuffix(name: string): boolean {
  return publicSuffix(name) === name;
}

/** The registered domain: the public suffix and one label more (the name itself if it has no more). */
export function registeredDomain(name: string): string {
  const suffix = publicSuffix(name);
  if (suffix === name) return name;
  const rest = name.slice(0, -suffix.length - 1).split('.');
  return `${rest[rest.length - 1]}.${suffix}`;
}
