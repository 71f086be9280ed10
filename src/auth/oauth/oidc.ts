import * as client from 'openid-client';
import type { OidcConfig } from '../../config.js';
import {
  LoginFailure,
  checkEndpoint,
  cleanEmail,
  cleanText,
  clientConfiguration,
  safeAvatarUrl,
  type AuthorizeParams,
  type CallbackChecks,
  type Identity,
  type LoginProvider,
} from './provider.js';

// The generic OpenID Connect provider (--oauth-*): authorization code + PKCE S256 via
// openid-client with the flags' endpoints (no discovery). With the `openid` scope a nonce is
// sent and the ID token is required and validated (iss, aud, azp, exp, iat, nonce); claims come
// from it, overlaid by the userinfo endpoint when one is configured (whose `sub` must match).
//
// Issuer: the flags name no issuer, yet ID tokens and RFC 9207 `iss` responses are checked
// against one. It is, in order: `issuer` on the config (an optional --oauth-issuer), the `iss`
// the provider put in its redirect (RFC 9207), the origin of --oauth-authorize-url. Trusting
// the redirect's `iss` costs nothing: the ID token it is compared with comes straight from the
// configured token endpoint, and each provider has its own callback and state (no mix-up).

type OidcSettings = OidcConfig & { issuer?: string | null };

export class OidcProvider implements LoginProvider {
  readonly name: string;
  readonly usesNonce: boolean;
  private readonly redirectUri: string;
  private readonly endpoints: Record<string, string>;

  constructor(
    private readonly cfg: OidcSettings,
    baseUrl: string,
  ) {
    this.name = cfg.name;
    this.usesNonce = cfg.scopes.split(/\s+/).includes('openid');
    this.redirectUri = `${baseUrl}/auth/v1/${cfg.name}/callback`;
    this.endpoints = { '--oauth-authorize-url': cfg.authorizeUrl, '--oauth-token-url': cfg.tokenUrl };
    if (cfg.userinfoUrl) this.endpoints['--oauth-userinfo-url'] = cfg.userinfoUrl;
    for (const [what, url] of Object.entries(this.endpoints)) checkEndpoint(url, what);
  }

  private configuration(issuer: string): client.Configuration {
    return clientConfiguration(
      {
        issuer,
        authorization_endpoint: this.cfg.authorizeUrl,
        token_endpoint: this.cfg.tokenUrl,
        ...(this.cfg.userinfoUrl ? { userinfo_endpoint: this.cfg.userinfoUrl } : {}),
      },
      this.endpoints,
      this.cfg.clientId,
      this.cfg.clientSecret,
      // client_secret_basic: the OpenID Connect default, the one every provider accepts.
      'basic',
    );
  }

  private defaultIssuer(): string {
    return this.cfg.issuer || new URL(this.cfg.authorizeUrl).origin;
  }

  authorizationUrl(p: AuthorizeParams): URL {
    const params: Record<string, string> = {
      redirect_uri: this.redirectUri,
      scope: this.cfg.scopes,
      state: p.state,
      code_challenge: p.codeChallenge,
      code_challenge_method: 'S256',
    };
    if (p.nonce) params.nonce = p.nonce;
    return client.buildAuthorizationUrl(this.configuration(this.defaultIssuer()), params);
  }

  async identify(callbackUrl: URL, checks: CallbackChecks): Promise<Identity> {
    const issuer = this.cfg.issuer || callbackUrl.searchParams.get('iss') || this.defaultIssuer();
    const config = this.configuration(issuer);
    const tokens = await client.authorizationCodeGrant(config, callbackUrl, {
      pkceCodeVerifier: checks.verifier,
      expectedState: checks.state,
      ...(checks.nonce ? { expectedNonce: checks.nonce, idTokenExpected: true } : {}),
    });
    const idClaims = tokens.claims();
    let claims: Record<string, unknown> = { ...(idClaims ?? {}) };
    if (this.cfg.userinfoUrl) {
      const info = await client.fetchUserInfo(config, tokens.access_token, idClaims?.sub ?? client.skipSubjectCheck);
      claims = { ...claims, ...info };
    } else if (!idClaims) {
      throw new LoginFailure('the provider returned no ID token and no userinfo endpoint is configured (--oauth-userinfo-url)', 'server_error');
    }
    return this.map(claims);
  }

  private map(claims: Record<string, unknown>): Identity {
    const rawId = claims[this.cfg.idField];
    const subject = typeof rawId === 'number' && Number.isSafeInteger(rawId) ? String(rawId) : cleanText(rawId, 255);
    if (!subject) {
      throw new LoginFailure(`the provider's answer has no "${this.cfg.idField}" claim (--oauth-id-field) to identify you`, 'server_error');
    }
    const verified = claims.email_verified;
    return {
      subject,
      email: cleanEmail(claims[this.cfg.emailField]),
      // Some providers send the boolean as a string.
      emailVerified: verified === true || verified === 'true',
      name: cleanText(claims[this.cfg.nameField], 200) ?? '',
      avatarUrl: safeAvatarUrl(claims[this.cfg.avatarField]),
    };
  }
}
