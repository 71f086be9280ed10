import { Command, Option, InvalidArgumentError } from 'commander';
import { availableParallelism } from 'node:os';
import { parseCidr, type Cidr } from './protocol/cidr.js';
import { browserBlockedPort } from './listen.js';
import { burrowVersion } from './version.js';
import { defaultLogFormat, type LogFormat } from './log.js';
import { parseResolvers, type DnsServer } from './acme/dns-wait.js';

// The only reader of process.env. Flags beat env; every flag --foo-bar also reads
// BURROW_FOO_BAR unless the spec names its own variable (README "Server flags").
export interface OidcConfig {
  name: string;
  clientId: string;
  clientSecret: string;
  authorizeUrl: string;
  tokenUrl: string;
  userinfoUrl: string | null;
  /** Expected `iss`; default: the provider's RFC 9207 `iss`, else the authorize URL's origin. */
  issuer: string | null;
  scopes: string;
  idField: string;
  emailField: string;
  nameField: string;
  avatarField: string;
}

export interface GithubConfig {
  clientId: string;
  clientSecret: string;
  /** https://github.com: where the browser authorizes and the code is exchanged. */
  webUrl: string;
  /** https://api.github.com: user and email lookups. */
  apiUrl: string;
}

/**
 * TLS on the main port: PEM files (`certFile` the default, `dir` more NAME.crt/NAME.key pairs
 * chosen by SNI) and/or certificates burrowd gets by itself over ACME (`acme`). Without
 * `certFile` the ACME certificate of <domain> is the default.
 */
export interface TlsConfig {
  certFile: string | null;
  keyFile: string | null;
  dir: string | null;
  acme: AcmeConfig | null;
}

/** --acme-*: the CA and how the tunnel wildcard's DNS-01 challenge is answered. */
export interface AcmeConfig {
  directoryUrl: string;
  email: string;
  eab: { kid: string; hmac: string } | null;
  /** --acme-dns-hook: `script add|remove <fqdn> <value>`; null: print the record and poll. */
  dnsHook: string | null;
  /** --dns-resolver: the servers asked instead of the zone's authoritative ones. */
  resolvers: DnsServer[] | null;
}

export const LETS_ENCRYPT = 'https://acme-v02.api.letsencrypt.org/directory';

export interface Config {
  host: string;
  port: number;
  domain: string;
  /** Public address; when not given it follows the port the server actually listens on. */
  baseUrl: string;
  baseUrlExplicit: boolean;
  databaseUrl: string | null;
  /** --node-url: this node's own address in a cluster (links and clients reach it there); null: a single node */
  nodeUrl: string | null;
  dataDir: string;
  workers: number;
  tcpPortRange: { min: number; max: number } | null;
  /** Live TCP tunnels (bound ports) one user may hold across all connections and shards. */
  maxTcpPortsPerUser: number;
  seedApiKey: boolean;
  initialAdminEmail: string | null;
  github: GithubConfig | null;
  oidc: OidcConfig | null;
  loginKeyTtlSecs: number;
  logLevel: string;
  /** json lines, or pretty (one readable line per entry); default pretty on a terminal. */
  logFormat: LogFormat;
  authFailureLimit: number;
  shutdownTimeoutMs: number;
  /** Tunnel control connections: Ping interval (a connection silent for HEARTBEAT_MISSES of them is dropped). */
  heartbeatIntervalMs: number;
  /** Concurrent tunnelled HTTP requests one visitor IP may have on a shard (more: 429). */
  visitorConcurrency: number;
  /** --h2-max-streams: concurrent HTTP/2 streams per visitor connection (SETTINGS_MAX_CONCURRENT_STREAMS). */
  h2MaxStreams: number;
  /** The public port's own bounds on connections, their timers and their buffers (edge/front-limits.ts). */
  front: FrontLimitsConfig;
  /** --metrics-addr: a listener of its own serving GET /metrics without a key (null: off). */
  metricsAddr: { host: string; port: number } | null;
  /** Tests only: how long a control connection's resumption ticket lives (a day). */
  resumeTicketTtlMs: number;
  /** Tests only: enables the route that crashes a shard. */
  faultInjection: boolean;
  /** null: the port speaks plain HTTP. */
  tls: TlsConfig | null;
  /** Plain-HTTP port that redirects to HTTPS (needs tls). */
  httpPort: number | null;
  /** Peers whose X-Forwarded-For/-Proto are kept (src/http/client-address.ts). */
  trustProxy: Cidr[];
  /** The main port expects PROXY protocol v2 headers. */
  proxyProtocol: boolean;
  /** --proxy-protocol-from: peers allowed to send a PROXY header (empty: any peer). */
  proxyProtocolFrom: Cidr[];
  /** Seconds an id stays reserved for the user who last held it (0: none). */
  idGraceSecs: number;
  /** A tunnel's id is held (--id-grace) only once its user has used it this long. */
  idGraceMinLifetimeSecs: number;
  /** Ids one user may hold through --id-grace; past it their oldest hold ends. */
  idGraceMaxPerUser: number;
  /** Live tunnels one user may hold over every connection and shard. */
  maxTunnelsPerUser: number;
  /** Control connections one user may hold over every shard (lanes excluded). */
  maxConnectionsPerUser: number;
  /** Opens one user may make per minute. */
  maxRegistrationsPerMinute: number;
  /** Closed sessions older than this are deleted (null: kept). */
  sessionRetentionSecs: number | null;
  /** Who may sign up and log in through a provider (src/auth/oauth/admission.ts). */
  signup: SignupPolicy;
}

/** --first-byte-timeout, --send-timeout, --max-connections-per-ip, --public-fd-limit, --visitor-buffer-budget. */
export interface FrontLimitsConfig {
  /** A new connection that sends nothing for this long is closed. */
  firstByteTimeoutMs: number;
  /** A connection whose output makes no progress for this long is closed (nginx's send_timeout). */
  sendTimeoutMs: number;
  /** Open public connections one address group (IPv4 address, IPv6 /64) may hold on a shard. */
  maxConnectionsPerIp: number;
  /** Descriptors the public port may use over all shards; null: three quarters of the open-file limit. */
  publicFdLimit: number | null;
  /** Bytes of answers a shard may hold for visitors that read slowly, before windows shrink and new requests wait. */
  visitorBufferBudgetBytes: number;
}

/** --signup, --github-allowed-orgs, --oauth-allowed-email-domains. */
export interface SignupPolicy {
  /** open: new users are created active; deactivated: created deactivated; closed: refused. */
  mode: 'open' | 'deactivated' | 'closed';
  /** GitHub org logins (lowercase); empty: any GitHub account. */
  githubAllowedOrgs: string[];
  /** Email domains (lowercase); empty: any. Verified emails only when set. */
  allowedEmailDomains: string[];
  /** --oauth-link-admins: a first login may be linked to an existing admin by verified email. */
  linkAdmins: boolean;
}

function int(name: string, min: number, max: number) {
  return (v: string): number => {
    // Decimal digits only: Number() would also take "1e3", "0x10", " 12 " and "".
    const n = /^\d{1,16}$/.test(v) ? Number(v) : NaN;
    if (!Number.isInteger(n) || n < min || n > max) {
      throw new InvalidArgumentError(`${name} must be an integer in ${min}..${max}, got "${v}"`);
    }
    return n;
  };
}

// Returns 'off' rather than null: commander drops a null parse result for env values.
function portRange(v: string): { min: number; max: number } | 'off' {
  if (v === 'off') return 'off';
  const m = /^(\d+)-(\d+)$/.exec(v);
  const min = m ? Number(m[1]) : NaN;
  const max = m ? Number(m[2]) : NaN;
  if (!m || min < 1 || max > 65535 || min > max) {
    throw new InvalidArgumentError(`expected "MIN-MAX" within 1-65535 or "off", got "${v}"`);
  }
  return { min, max };
}

// Returns 'off' for an empty value (env set but empty), like portRange.
function hostPort(v: string): { host: string; port: number } | 'off' {
  if (v === '') return 'off';
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([^:[\]\s]+)):(\d{1,5})$/.exec(v);
  const port = m ? Number(m[3]) : NaN;
  if (!m || port > 65535) throw new InvalidArgumentError(`expected HOST:PORT (e.g. 127.0.0.1:9100 or [::1]:9100), got "${v}"`);
  return { host: m[1] ?? m[2]!, port };
}

/** An allow-list of peers whose emptiness would mean "anyone": given, it must name someone. */
function nonEmptyCidrList(flag: string) {
  return (v: string): Cidr[] => {
    const cidrs = cidrList(v);
    if (cidrs.length === 0) throw new InvalidArgumentError(emptyAllowList(flag, 'CIDR[,CIDR...]'));
    return cidrs;
  };
}

// An empty value (`--flag ""`, `","`, an empty environment variable) is a mistake, never
// "no restriction": leaving the flag out says that.
function emptyAllowList(flag: string, form: string): string {
  return `${flag} was given but names nothing (expected ${form}); to allow everyone leave ${flag} and its environment variable unset`;
}

function cidrList(v: string): Cidr[] {
  return v
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '')
    .map((s) => {
      const c = parseCidr(s);
      if (!c) throw new InvalidArgumentError(`"${s}" is not an IP address or CIDR block (e.g. 10.0.0.0/8, 2001:db8::/32)`);
      return c;
    });
}

// Returns 'off' rather than null (commander drops a null parse result for env values).
/** A duration (as `duration` reads it) of at least one second, as milliseconds. */
function timeoutMs(name: string, maxS: number) {
  return (v: string): number => {
    const s = duration(v);
    if (s < 1 || s > maxS) throw new InvalidArgumentError(`${name} must be between 1s and ${maxS}s, got "${v}"`);
    return s * 1000;
  };
}

function durationOrOff(v: string): number | 'off' {
  return v === 'off' ? 'off' : duration(v);
}

function nameList(flag: string, form: string, what: string, re: RegExp) {
  return (v: string): string[] => {
    const names = v.split(',').map((s) => s.trim().toLowerCase()).filter((s) => s !== '');
    if (names.length === 0) throw new InvalidArgumentError(emptyAllowList(flag, form));
    for (const n of names) if (!re.test(n)) throw new InvalidArgumentError(`"${n}" is not ${what}`);
    return names;
  };
}

function duration(v: string): number {
  const m = /^(\d+)(s|m|h|d)?$/.exec(v);
  if (!m) throw new InvalidArgumentError(`expected a duration like 90d, 12h or 3600 (seconds), got "${v}"`);
  const mult = { s: 1, m: 60, h: 3600, d: 86400 }[(m[2] ?? 's') as 's' | 'm' | 'h' | 'd'];
  return Number(m[1]) * mult;
}

/** A flag whose env var is BURROW_<FLAG> unless the spec names another. */
function opt(flags: string, description: string, env?: string): Option {
  const long = /--([a-z0-9-]+)/.exec(flags)![1]!;
  return new Option(flags, description).env(env ?? `BURROW_${long.toUpperCase().replaceAll('-', '_')}`);
}

export function buildServerCommand(): Command {
  return new Command('burrowd')
    .description('burrow tunnel server: management API, browser login, tunnel control and public traffic on one port')
    .addOption(opt('--host <addr>', 'bind address for the HTTP port and TCP tunnel ports').default('0.0.0.0'))
    .addOption(opt('--port <n>', 'the one HTTP port (0 picks a free one)').argParser(int('--port', 0, 65535)).default(8080))
    .addOption(opt('--domain <name>', 'tunnels are served at <id>.<domain>; any other Host gets the API').default('localhost'))
    .addOption(opt('--base-url <url>', 'public address of the server (default http://<domain>:<port>, https:// with --tls-cert)', 'BASE_URL'))
    .addOption(opt('--database-url <url>', 'PostgreSQL URL; absent or empty: embedded database in --data-dir', 'DATABASE_URL'))
    .addOption(opt('--node-url <url>', 'join a cluster: this node\'s own address (http[s]://host:port), where the other nodes on the same --database-url reach it; needs an external PostgreSQL'))
    .addOption(opt('--data-dir <dir>', 'embedded database files').default('./burrow-data'))
    .addOption(opt('--workers <n>', 'shard worker threads').argParser(int('--workers', 1, 256)).default(availableParallelism(), 'CPU count'))
    .addOption(opt('--tcp-port-range <min-max|off>', 'ports TCP tunnels may take').argParser(portRange).default(portRange('20000-29999'), '20000-29999'))
    .addOption(opt('--max-tcp-ports-per-user <n>', 'TCP tunnel ports one user may hold at once (all connections), so one key cannot take the whole range').argParser(int('--max-tcp-ports-per-user', 1, 65535)).default(10))
    .addOption(opt('--max-tunnels-per-user <n>', 'live tunnels one user may hold, over every connection and shard').argParser(int('--max-tunnels-per-user', 1, 1_000_000)).default(100))
    .addOption(opt('--max-connections-per-user <n>', 'tunnel control connections one user may hold over every shard (lanes excluded)').argParser(int('--max-connections-per-user', 1, 1_000_000)).default(32))
    .addOption(opt('--max-registrations-per-minute <n>', 'tunnel Opens one user may make per minute; more are refused (the client retries later)').argParser(int('--max-registrations-per-minute', 1, 1_000_000)).default(120))
    .addOption(opt('--id-grace <duration>', 'a tunnel id stays reserved this long for the user who last held it (0: not at all); another user is refused').argParser(duration).default(86400, '24h'))
    .addOption(opt('--id-grace-min-lifetime <duration>', 'only an id its user kept this long (over reconnects) is held for --id-grace; a shorter-lived one is free at once').argParser(duration).default(120, '2m'))
    .addOption(opt('--id-grace-max-per-user <n>', 'ids one user may hold through --id-grace; past it the oldest hold ends and anyone may take that id').argParser(int('--id-grace-max-per-user', 1, 1_000_000)).default(100))
    .addOption(opt('--session-retention <duration|off>', 'closed sessions older than this are deleted, in batches; off keeps them').argParser(durationOrOff).default(90 * 86400, '90d'))
    .addOption(opt('--signup <mode>', 'a new user at browser login: open (created active), deactivated (created deactivated until an admin reactivates them), closed (refused: only users an admin created may log in)').choices(['open', 'deactivated', 'closed']).default('open'))
    .addOption(opt('--github-allowed-orgs <orgs>', 'ORG[,ORG...]: only members of these GitHub organisations may log in through GitHub (asks for the read:org scope)').argParser(nameList('--github-allowed-orgs', 'ORG[,ORG...]', 'a GitHub organisation name', /^[a-z0-9](?:[a-z0-9-]{0,38})$/)))
    .addOption(opt('--oauth-allowed-email-domains <domains>', 'D[,D...]: only verified emails in these domains may log in, through any provider').argParser(nameList('--oauth-allowed-email-domains', 'D[,D...]', 'a domain name', /^[a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?$/)))
    .addOption(opt('--oauth-link-admins', 'a first browser login whose verified email is an existing admin\'s is linked to that admin (default: refused; the seed admin and addresses no mail reaches are never linked)').default(false))
    .addOption(opt('--seed-api-key', 'create the seed admin once; print its admin key (kept in the data dir, the same at every start) as the first stdout line').default(false))
    .addOption(opt('--initial-admin-email <email>', 'promote this user to admin at first OAuth login'))
    .addOption(opt('--github-client-id <id>', 'GitHub OAuth app client id', 'GITHUB_CLIENT_ID'))
    .addOption(opt('--github-client-secret <secret>', 'GitHub OAuth app client secret', 'GITHUB_CLIENT_SECRET'))
    .addOption(opt('--github-url <url>', 'GitHub web address (for tests)').default('https://github.com').hideHelp())
    .addOption(opt('--github-api-url <url>', 'GitHub API address (for tests)').default('https://api.github.com').hideHelp())
    .addOption(opt('--oauth-provider-name <name>', 'generic OpenID Connect provider name', 'OAUTH_PROVIDER_NAME'))
    .addOption(opt('--oauth-client-id <id>', 'OIDC client id', 'OAUTH_CLIENT_ID'))
    .addOption(opt('--oauth-client-secret <secret>', 'OIDC client secret', 'OAUTH_CLIENT_SECRET'))
    .addOption(opt('--oauth-authorize-url <url>', 'OIDC authorization endpoint', 'OAUTH_AUTHORIZE_URL'))
    .addOption(opt('--oauth-token-url <url>', 'OIDC token endpoint', 'OAUTH_TOKEN_URL'))
    .addOption(opt('--oauth-userinfo-url <url>', 'OIDC userinfo endpoint', 'OAUTH_USERINFO_URL'))
    .addOption(opt('--oauth-issuer <url>', 'OIDC issuer the ID token must name (default: the provider\'s iss, else the authorize URL\'s origin)', 'OAUTH_ISSUER'))
    .addOption(opt('--oauth-scopes <scopes>', 'OIDC scopes', 'OAUTH_SCOPES').default('openid email profile'))
    .addOption(opt('--oauth-id-field <field>', 'claim holding the subject', 'OAUTH_ID_FIELD').default('sub'))
    .addOption(opt('--oauth-email-field <field>', 'claim holding the email', 'OAUTH_EMAIL_FIELD').default('email'))
    .addOption(opt('--oauth-name-field <field>', 'claim holding the display name', 'OAUTH_NAME_FIELD').default('name'))
    .addOption(opt('--oauth-avatar-field <field>', 'claim holding the avatar URL', 'OAUTH_AVATAR_FIELD').default('picture'))
    .addOption(opt('--login-key-ttl <duration>', 'validity of keys issued by browser login').argParser(duration).default(90 * 86400, '90d'))
    .addOption(opt('--auth-failure-limit <n>', 'failed authentications per minute, per client IP and per key prefix, before 429').argParser(int('--auth-failure-limit', 1, 1_000_000)).default(100))
    .addOption(opt('--shutdown-timeout <ms>', 'how long shutdown waits for in-flight work').argParser(int('--shutdown-timeout', 0, 600_000)).default(10_000))
    .addOption(opt('--heartbeat-interval <ms>', 'tunnel control connections ping this often; one silent for 3 intervals is dropped').argParser(int('--heartbeat-interval', 100, 10_000)).default(5_000))
    .addOption(opt('--visitor-concurrency <n>', 'concurrent tunnelled HTTP requests per visitor IP and shard worker; more are answered 429').argParser(int('--visitor-concurrency', 1, 1_000_000)).default(128))
    .addOption(opt('--h2-max-streams <n>', 'concurrent HTTP/2 streams per visitor connection (h2 and h2c); an abuser of stream resets or control frames gets GOAWAY').argParser(int('--h2-max-streams', 1, 10_000)).default(100))
    .addOption(opt('--first-byte-timeout <duration>', 'a public connection that sends nothing for this long after it opened is closed').argParser(timeoutMs('--first-byte-timeout', 300)).default(5_000, '5s'))
    .addOption(opt('--send-timeout <duration>', 'a public connection whose visitor takes none of its answer for this long is closed (as nginx\'s send_timeout)').argParser(timeoutMs('--send-timeout', 3600)).default(60_000, '60s'))
    .addOption(opt('--max-connections-per-ip <n>', 'open public connections per client address (an IPv4 address, an IPv6 /64; the PROXY header\'s under --proxy-protocol; --trust-proxy peers exempt) and shard worker; more are closed at once').argParser(int('--max-connections-per-ip', 1, 1_000_000)).default(512))
    .addOption(opt('--public-fd-limit <n>', 'file descriptors the public port may use over all shard workers (a connection: 1, 3 while it talks to the API); past nine tenths only control connections and API requests are served, past it new connections are closed').argParser(int('--public-fd-limit', 64, 100_000_000)).default(undefined, 'three quarters of the open-file limit'))
    .addOption(opt('--visitor-buffer-budget <MiB>', 'MiB of answers a shard worker may hold for visitors that read slower than their tunnel answers: past half, their windows shrink to 256 KiB; past it, new requests from addresses already holding some get 503; past twice, every new request gets 503 and the visitors that began holding bytes last are disconnected until under it').argParser(int('--visitor-buffer-budget', 1, 1_000_000)).default(32))
    .addOption(opt('--metrics-addr <host:port>', 'also serve GET /metrics without a key on this address (e.g. 127.0.0.1:9100); on the main port it needs an admin key with the management scope').argParser(hostPort))
    .addOption(opt('--tls-cert <file>', 'PEM certificate (chain) for HTTPS on the port, typically for <domain> and *.<domain>; SIGHUP reloads it'))
    .addOption(opt('--tls-key <file>', 'PEM private key of --tls-cert'))
    .addOption(opt('--tls-dir <dir>', 'more certificates chosen by SNI: NAME.crt + NAME.key per server name NAME (e.g. *.example.org.crt)'))
    .addOption(opt('--http-port <n>', 'also serve plain HTTP on this port, redirecting (308) to HTTPS (needs --tls-cert or --acme-email); answers ACME HTTP-01 challenges').argParser(int('--http-port', 1, 65535)))
    .addOption(opt('--acme-email <email>', 'get and renew the certificate of <domain> and *.<domain> by ACME (contact address of the account); no --tls-cert needed'))
    .addOption(opt('--acme-ca <url>', 'ACME directory URL of the CA', 'BURROW_ACME_CA').default(LETS_ENCRYPT, "Let's Encrypt"))
    .addOption(opt('--acme-eab-kid <kid>', 'external account binding: key id given by the CA'))
    .addOption(opt('--acme-eab-hmac <key>', 'external account binding: base64url MAC key given by the CA'))
    .addOption(opt('--acme-dns-hook <script>', 'answers the wildcard\'s DNS-01 challenge: run as `script add|remove <fqdn> <value>`, exit 0 on success; without it burrowd prints the TXT record to create and waits'))
    .addOption(opt('--dns-resolver <host:port,...>', 'DNS servers asked whether a challenge or ownership record is in place (default: the zone\'s authoritative servers)'))
    .addOption(opt('--trust-proxy <cidrs>', 'load balancers (CIDR[,CIDR...]) whose X-Forwarded-For/-Proto are kept; anyone else\'s are replaced').argParser(cidrList))
    .addOption(opt('--proxy-protocol', 'the port expects a PROXY protocol header (v1 or v2) on every connection, from a load balancer; works with --tls-cert').default(false))
    .addOption(opt('--proxy-protocol-from <cidrs>', 'with --proxy-protocol: the load balancers (CIDR[,CIDR...]) allowed to send the header; connections from anyone else are closed').argParser(nonEmptyCidrList('--proxy-protocol-from')))
    .addOption(opt('--fault-injection', 'tests only: enable POST /__fault/crash-shard').default(false).hideHelp())
    .addOption(opt('--resume-ticket-ttl <ms>', 'tests only: how long a resumption ticket lives').argParser(int('--resume-ticket-ttl', 2_000, 86_400_000)).default(86_400_000).hideHelp())
    .addOption(opt('--log-format <format>', 'stderr log lines: json (one JSON object per line, for journald and log shippers) or pretty (readable, coloured on a terminal)').choices(['json', 'pretty']).default(undefined, 'pretty on a terminal, json otherwise'))
    .addOption(opt('--log-level <level>', 'pino level: fatal, error, warn, info, debug, trace, silent').choices(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'))
    .version(burrowVersion(), '-V, --version', 'print the burrow version')
    .addHelpText('after', '\nCommands:\n  burrowd service print  a systemd unit for this installation, on stdout (burrowd service --help)\n')
    .showHelpAfterError('(burrowd --help lists every flag)')
    .allowExcessArguments(false);
}

type Opts = Record<string, unknown>;
const str = (v: unknown): string | null => (typeof v === 'string' && v !== '' ? v : null);

/** Cross-flag rules that commander cannot express; throws with a message for the operator. */
export function configFromOptions(o: Opts): Config {
  const github =
    str(o.githubClientId) || str(o.githubClientSecret)
      ? {
          clientId: required(o.githubClientId, '--github-client-id'),
          clientSecret: required(o.githubClientSecret, '--github-client-secret'),
          webUrl: String(o.githubUrl).replace(/\/$/, ''),
          apiUrl: String(o.githubApiUrl).replace(/\/$/, ''),
        }
      : null;
  const oidcFlags = ['oauthProviderName', 'oauthClientId', 'oauthAuthorizeUrl', 'oauthTokenUrl'];
  const oidc = oidcFlags.some((k) => str(o[k]))
    ? {
        name: required(o.oauthProviderName, '--oauth-provider-name'),
        clientId: required(o.oauthClientId, '--oauth-client-id'),
        clientSecret: str(o.oauthClientSecret) ?? '',
        authorizeUrl: required(o.oauthAuthorizeUrl, '--oauth-authorize-url'),
        tokenUrl: required(o.oauthTokenUrl, '--oauth-token-url'),
        userinfoUrl: str(o.oauthUserinfoUrl),
        issuer: str(o.oauthIssuer),
        scopes: String(o.oauthScopes),
        idField: String(o.oauthIdField),
        emailField: String(o.oauthEmailField),
        nameField: String(o.oauthNameField),
        avatarField: String(o.oauthAvatarField),
      }
    : null;
  if (oidc && !/^[a-z0-9][a-z0-9-]{0,31}$/.test(oidc.name)) {
    throw new Error(`--oauth-provider-name must be a lowercase name like "okta" (a-z, 0-9, -), got "${oidc.name}"`);
  }
  if (oidc?.name === 'github') throw new Error('--oauth-provider-name "github" is the built-in provider; choose another name');
  const baseUrlFlag = str(o.baseUrl);
  if ((github || oidc) && !baseUrlFlag) {
    throw new Error('--base-url (or BASE_URL) is required when an OAuth provider is configured: it forms the callback URL');
  }
  const tls = tlsFromOptions(o);
  const httpPort = typeof o.httpPort === 'number' ? o.httpPort : null;
  if (httpPort !== null && !tls) throw new Error('--http-port redirects to HTTPS: it needs --tls-cert and --tls-key, or --acme-email');
  if (httpPort !== null && httpPort === o.port) throw new Error(`--http-port ${httpPort} is the main --port; choose another`);
  const proxyProtocol = Boolean(o.proxyProtocol);
  if (o.proxyProtocolFrom !== undefined && !proxyProtocol) throw new Error('--proxy-protocol-from names who may send PROXY headers: it needs --proxy-protocol');
  const port = o.port as number;
  for (const [flag, p] of [['--port', port], ['--http-port', httpPort]] as const) {
    if (p !== null && browserBlockedPort(p)) throw new Error(`${flag} ${p} is a port browsers and fetch clients refuse to connect to (the fetch standard's "bad ports", e.g. 6000, 6665-6669): choose another, e.g. 8080`);
  }
  const domain = String(o.domain).toLowerCase();
  const baseUrl = (baseUrlFlag ?? defaultBaseUrl(tls !== null, domain, port)).replace(/\/$/, '');
  let baseHost: string;
  try {
    baseHost = new URL(baseUrl).hostname.toLowerCase();
  } catch {
    throw new Error(`--base-url must be an absolute URL, got "${baseUrl}"`);
  }
  // <label>.<domain> is where a tunnel with id <label> is served: the API (and its login
  // callbacks) there would be reachable by whoever registers that id, or shadow the tunnel.
  if (baseHost.endsWith(`.${domain}`) && !baseHost.slice(0, -domain.length - 1).includes('.')) {
    throw new Error(`--base-url host "${baseHost}" is a tunnel host (<id>.${domain}): use ${domain} itself or a name outside it`);
  }
  checkNodeHost(nodeUrlOf(str(o.nodeUrl), str(o.databaseUrl)), domain);
  checkRetentionCoversGrace(o.sessionRetention as number | 'off', o.idGrace as number);
  return Object.freeze({
    host: String(o.host),
    port,
    domain,
    baseUrl,
    baseUrlExplicit: baseUrlFlag !== null,
    databaseUrl: str(o.databaseUrl),
    nodeUrl: nodeUrlOf(str(o.nodeUrl), str(o.databaseUrl)),
    dataDir: String(o.dataDir),
    workers: o.workers as number,
    tcpPortRange: o.tcpPortRange === 'off' ? null : (o.tcpPortRange as Config['tcpPortRange']),
    maxTcpPortsPerUser: o.maxTcpPortsPerUser as number,
    seedApiKey: Boolean(o.seedApiKey),
    initialAdminEmail: str(o.initialAdminEmail)?.toLowerCase() ?? null,
    github,
    oidc,
    loginKeyTtlSecs: o.loginKeyTtl as number,
    logLevel: String(o.logLevel),
    logFormat: o.logFormat === 'json' || o.logFormat === 'pretty' ? o.logFormat : defaultLogFormat(),
    authFailureLimit: o.authFailureLimit as number,
    shutdownTimeoutMs: o.shutdownTimeout as number,
    heartbeatIntervalMs: o.heartbeatInterval as number,
    visitorConcurrency: o.visitorConcurrency as number,
    h2MaxStreams: o.h2MaxStreams as number,
    front: Object.freeze({
      firstByteTimeoutMs: o.firstByteTimeout as number,
      sendTimeoutMs: o.sendTimeout as number,
      maxConnectionsPerIp: o.maxConnectionsPerIp as number,
      publicFdLimit: typeof o.publicFdLimit === 'number' ? o.publicFdLimit : null,
      visitorBufferBudgetBytes: (o.visitorBufferBudget as number) * 1024 * 1024,
    }),
    metricsAddr: o.metricsAddr === undefined || o.metricsAddr === 'off' ? null : (o.metricsAddr as Config['metricsAddr']),
    faultInjection: Boolean(o.faultInjection),
    resumeTicketTtlMs: o.resumeTicketTtl as number,
    tls,
    httpPort,
    trustProxy: (o.trustProxy as Cidr[] | undefined) ?? [],
    proxyProtocol,
    proxyProtocolFrom: (o.proxyProtocolFrom as Cidr[] | undefined) ?? [],
    idGraceSecs: o.idGrace as number,
    idGraceMinLifetimeSecs: o.idGraceMinLifetime as number,
    idGraceMaxPerUser: o.idGraceMaxPerUser as number,
    maxTunnelsPerUser: o.maxTunnelsPerUser as number,
    maxConnectionsPerUser: o.maxConnectionsPerUser as number,
    maxRegistrationsPerMinute: o.maxRegistrationsPerMinute as number,
    sessionRetentionSecs: o.sessionRetention === 'off' ? null : (o.sessionRetention as number),
    signup: Object.freeze({
      mode: o.signup as SignupPolicy['mode'],
      githubAllowedOrgs: (o.githubAllowedOrgs as string[] | undefined) ?? [],
      allowedEmailDomains: (o.oauthAllowedEmailDomains as string[] | undefined) ?? [],
      linkAdmins: Boolean(o.oauthLinkAdmins),
    }),
  });
}

/**
 * Id holds are read back from closed sessions at start-up: sessions deleted before the grace
 * ends would hand a held id to anyone after a restart.
 */
function checkRetentionCoversGrace(retention: number | 'off', idGrace: number): void {
  if (retention === 'off' || retention >= idGrace) return;
  throw new Error(`--session-retention (${retention} s) is shorter than --id-grace (${idGrace} s): an id's hold outlives the closed session it is read from; make --session-retention at least --id-grace, or lower --id-grace`);
}

/** --node-url: an http(s) origin; a cluster shares one external PostgreSQL, so the embedded one cannot serve it. */
function nodeUrlOf(v: string | null, databaseUrl: string | null): string | null {
  if (v === null) return null;
  let u: URL;
  try {
    u = new URL(v);
  } catch {
    throw new Error(`--node-url must be an absolute URL such as http://10.0.0.2:8080, got "${v}"`);
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error(`--node-url must be http:// or https://, got "${v}"`);
  if ((u.pathname !== '/' && u.pathname !== '') || u.search || u.hash || u.username) throw new Error(`--node-url is an origin (scheme, host, port) without path or credentials, got "${v}"`);
  if (!databaseUrl) throw new Error('--node-url needs --database-url: the nodes of a cluster share one PostgreSQL (the embedded database serves a single node)');
  return u.origin;
}

/** A node's address may not be a tunnel's host: its requests would be taken for that tunnel's. */
function checkNodeHost(nodeUrl: string | null, domain: string): void {
  if (nodeUrl === null) return;
  const host = new URL(nodeUrl).hostname.toLowerCase();
  if (host.endsWith(`.${domain}`) && !host.slice(0, -domain.length - 1).includes('.')) {
    throw new Error(`--node-url host "${host}" is a tunnel host (<id>.${domain}): give the node a name outside the tunnel domain, or its address`);
  }
}

function tlsFromOptions(o: Opts): TlsConfig | null {
  const certFile = str(o.tlsCert);
  const keyFile = str(o.tlsKey);
  const dir = str(o.tlsDir);
  const acme = acmeFromOptions(o);
  if (!certFile && !keyFile && !dir && !acme) return null;
  if (!!certFile !== !!keyFile) throw new Error('--tls-cert and --tls-key go together');
  if (!certFile && !acme) throw new Error('--tls-dir needs a default certificate: --tls-cert and --tls-key, or --acme-email');
  return { certFile, keyFile, dir, acme };
}

function acmeFromOptions(o: Opts): AcmeConfig | null {
  const email = str(o.acmeEmail);
  const others = ['acmeEabKid', 'acmeEabHmac', 'acmeDnsHook'].filter((k) => str(o[k]));
  if (!email) {
    if (others.length > 0) throw new Error('--acme-eab-kid, --acme-eab-hmac and --acme-dns-hook need --acme-email (which turns ACME on)');
    return null;
  }
  if (!/^[^\s@]{1,64}@[a-z0-9.-]{1,253}$/i.test(email)) throw new Error(`--acme-email "${email}" is not an email address`);
  const directoryUrl = String(o.acmeCa);
  let u: URL;
  try {
    u = new URL(directoryUrl);
  } catch {
    throw new Error(`--acme-ca must be the URL of an ACME directory, got "${directoryUrl}"`);
  }
  if (u.protocol !== 'https:') throw new Error(`--acme-ca must be an https:// URL, got "${directoryUrl}"`);
  const kid = str(o.acmeEabKid);
  const hmac = str(o.acmeEabHmac);
  if (!!kid !== !!hmac) throw new Error('--acme-eab-kid and --acme-eab-hmac go together');
  if (hmac && !/^[A-Za-z0-9_-]+={0,2}$/.test(hmac)) throw new Error('--acme-eab-hmac must be base64url, as the CA gives it');
  const resolverText = str(o.dnsResolver);
  return {
    directoryUrl,
    email,
    eab: kid && hmac ? { kid, hmac: hmac.replace(/=+$/, '') } : null,
    dnsHook: str(o.acmeDnsHook),
    resolvers: resolverText ? parseResolvers(resolverText) : null,
  };
}

function defaultBaseUrl(tls: boolean, domain: string, port: number): string {
  return `${tls ? 'https' : 'http'}://${domain}:${port}`;
}

function required(v: unknown, flag: string): string {
  const s = str(v);
  if (!s) throw new Error(`${flag} is required with the other options of its provider`);
  return s;
}

/** Parses argv (without node and script) and the environment into a Config, or exits with usage. */
export function parseConfig(argv: string[]): Config {
  const cmd = buildServerCommand().exitOverride((err) => {
    // --help exits 0; any usage error exits 2 (the convention the CLI's exit codes follow too).
    process.exit(err.exitCode === 0 ? 0 : 2);
  });
  cmd.parse(argv, { from: 'user' });
  try {
    return configFromOptions(cmd.opts());
  } catch (err) {
    cmd.error(`error: ${(err as Error).message}`, { exitCode: 2 });
    throw err;
  }
}

/** The config once the listening port is known (--port 0 picks one at start-up). */
export function withPort(config: Config, port: number): Config {
  return Object.freeze({ ...config, port, baseUrl: config.baseUrlExplicit ? config.baseUrl : defaultBaseUrl(config.tls !== null, config.domain, port) });
}
