import * as client from 'openid-client';
import type { GithubConfig } from '../../config.js';
import {
  LoginFailure,
  cleanEmail,
  cleanText,
  clientConfiguration,
  safeAvatarUrl,
  type AuthorizeParams,
  type CallbackChecks,
  type Identity,
  type LoginProvider,
} from './provider.js';

// The built-in GitHub provider: an OAuth app (no OpenID Connect, so no ID token and no nonce).
// openid-client runs the authorization code + PKCE S256 exchange against
// {webUrl}/login/oauth/{authorize,access_token}; who logged in comes from the REST API:
// GET {apiUrl}/user (subject = numeric id, stable across renames) and GET {apiUrl}/user/emails
// (the primary address and whether GitHub verified it). Both bases are flags so tests can
// point them at a local fake.

const SCOPES = 'read:user user:email';
/** With --github-allowed-orgs: private memberships are visible only with read:org. */
const SCOPES_WITH_ORGS = `${SCOPES} read:org`;
const API_HEADERS = { accept: 'application/vnd.github+json', 'x-github-api-version': '2022-11-28', 'user-agent': 'burrow' };

interface GithubUser {
  id?: unknown;
  login?: unknown;
  name?: unknown;
  avatar_url?: unknown;
}
interface GithubEmail {
  email?: unknown;
  primary?: unknown;
  verified?: unknown;
}

export class GithubProvider implements LoginProvider {
  readonly name = 'github';
  readonly usesNonce = false;
  private readonly config: client.Configuration;
  private readonly redirectUri: string;

  constructor(
    private readonly cfg: GithubConfig,
    baseUrl: string,
    /** --github-allowed-orgs (lowercase); empty: any GitHub account */
    private readonly allowedOrgs: readonly string[] = [],
  ) {
    this.redirectUri = `${baseUrl}/auth/v1/github/callback`;
    const authorize = `${cfg.webUrl}/login/oauth/authorize`;
    const token = `${cfg.webUrl}/login/oauth/access_token`;
    this.config = clientConfiguration(
      { issuer: cfg.webUrl, authorization_endpoint: authorize, token_endpoint: token },
      { '--github-url': cfg.webUrl, '--github-api-url': cfg.apiUrl },
      cfg.clientId,
      cfg.clientSecret,
      'post', // as GitHub documents it
    );
    // GitHub answers token errors with 200 and {"error": ...}; as a 400 openid-client reports
    // them as the OAuth errors they are (bad_verification_code, ...) instead of a shape error.
    this.config[client.customFetch] = async (url, options) => {
      const res = await fetch(url, options as RequestInit);
      if (url !== token || res.status !== 200) return res;
      const body = (await res.clone().json().catch(() => null)) as { error?: unknown } | null;
      if (!body || typeof body.error !== 'string') return res;
      return new Response(JSON.stringify(body), { status: 400, headers: { 'content-type': 'application/json' } });
    };
  }

  authorizationUrl(p: AuthorizeParams): URL {
    return client.buildAuthorizationUrl(this.config, {
      redirect_uri: this.redirectUri,
      scope: this.allowedOrgs.length > 0 ? SCOPES_WITH_ORGS : SCOPES,
      state: p.state,
      code_challenge: p.codeChallenge,
      code_challenge_method: 'S256',
    });
  }

  async identify(callbackUrl: URL, checks: CallbackChecks): Promise<Identity> {
    const tokens = await client.authorizationCodeGrant(this.config, callbackUrl, {
      pkceCodeVerifier: checks.verifier,
      expectedState: checks.state,
    });
    const user = (await this.api(tokens.access_token, '/user')) as GithubUser;
    if (this.allowedOrgs.length > 0 && !(await this.inAllowedOrg(tokens.access_token))) {
      throw new LoginFailure(`Your GitHub account ${cleanText(user.login, 100) ?? ''} is not an active member of an organisation this server admits (${this.allowedOrgs.join(', ')}). Ask an administrator.`);
    }
    const emails = await this.api(tokens.access_token, '/user/emails');
    const id = user.id;
    if (typeof id !== 'number' || !Number.isSafeInteger(id)) throw new LoginFailure('GitHub did not say who you are (no user id)', 'server_error');
    const primary = Array.isArray(emails) ? (emails as GithubEmail[]).find((e) => e && e.primary === true) : undefined;
    const login = cleanText(user.login, 100);
    return {
      subject: String(id),
      email: cleanEmail(primary?.email),
      emailVerified: primary?.verified === true,
      name: cleanText(user.name, 200) ?? login ?? '',
      avatarUrl: safeAvatarUrl(user.avatar_url),
    };
  }

  /** Active membership in one of the allowed orgs (GET /user/memberships/orgs/{org}: 404 when not a member). */
  private async inAllowedOrg(accessToken: string): Promise<boolean> {
    for (const org of this.allowedOrgs) {
      const path = `/user/memberships/orgs/${encodeURIComponent(org)}`;
      const res = await client.fetchProtectedResource(this.config, accessToken, new URL(this.cfg.apiUrl + path), 'GET', null, new Headers(API_HEADERS));
      if (res.status === 404) continue;
      if (!res.ok) throw new LoginFailure(`GitHub's API answered ${res.status} to GET ${path} (was the read:org scope granted?)`, 'server_error');
      const m = (await res.json().catch(() => null)) as { state?: unknown } | null;
      if (m?.state === 'active') return true;
    }
    return false;
  }

  private async api(accessToken: string, path: string): Promise<unknown> {
    const res = await client.fetchProtectedResource(this.config, accessToken, new URL(this.cfg.apiUrl + path), 'GET', null, new Headers(API_HEADERS));
    if (!res.ok) throw new LoginFailure(`GitHub's API answered ${res.status} to GET ${path}`, 'server_error');
    return res.json();
  }
}
