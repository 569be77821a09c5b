// A real authorization server for the tests of `serve --listen` as an OAuth resource server
// (tests/all/listen_oauth.rs, tests/clients/test_listen_oauth.py): `oidc-provider` from npm,
// pinned by tests/real-servers/install.sh, configured for the tests only. Never a
// production setup: its accounts sign in without a password.
//
//   node provider.mjs            (environment below; prints `listening ISSUER` when ready)
//
// PORT       the loopback port to listen on (required)
// ISSUER     the issuer it names in its metadata and tokens (default http://127.0.0.1:PORT);
//            a test runs a second provider with the first one's issuer and other keys,
//            to mint tokens signed by a key the real issuer never published
// OPAQUE     when set, access tokens for a resource are opaque (introspected), not JWTs
// DEFAULT_LOGIN  the identity a sign-in without `login_hint` signs in as (the browser test of
//            the console, whose sign-in request names none)
// KEYS       a JSON file of private JWKs to sign with; created when missing (an RSA key,
//            `rs-1`, and a P-256 key, `es-1`), so two providers can share keys (a token of
//            another issuer signed by a trusted key) or not (a token signed by another key)
//
// What it issues:
// - identities `alice` (groups `platform`), `bob` (groups `dev`) and `carol` (no groups),
//   signed in through the authorization code with PKCE by the public native client
//   `toolward-tests` (redirect `http://127.0.0.1/callback`); the identity is the
//   authorization request's `login_hint`: the interaction finishes at once, no login page,
//   consent granted for what was asked;
// - the device authorization grant (RFC 8628) for the public client `toolward-device`: the
//   person enters the user code at `/device` (device-approve.mjs plays that browser), and the
//   identity is the `login_hint` query parameter of the interaction URL, as the device's
//   request carries none;
// - the confidential client `toolward-console` (secret `secret-toolward-console`, HTTP Basic)
//   of the web console's OpenID Connect sign-in (tests/all/console_oidc.rs): the
//   authorization code with PKCE to `http://127.0.0.1/oidc/callback` (any port: a native
//   client's loopback redirect), scopes `openid email groups`, whose ID token carries
//   `email`, `email_verified` and `groups`; the identity `mallory` has markup in its email
//   and groups, for the console's escaping;
// - refresh tokens with `offline_access`;
// - for any `resource` (RFC 8707) that is an http(s) URL: JWT access tokens (RFC 9068)
//   whose `aud` is that resource, with the account's `groups` as a claim, scope `mcp:tools`;
// - client credentials for `service` (RS256), `es-service` (ES256) and `short-service`
//   (access tokens living 2 s), each with the secret `secret-<client id>`;
// - introspection (RFC 7662) and revocation.
import crypto from 'node:crypto';
import fs from 'node:fs';

import Provider from 'oidc-provider';

const port = Number(process.env.PORT);
if (!Number.isInteger(port) || port <= 0) {
  console.error('set PORT');
  process.exit(2);
}
const issuer = process.env.ISSUER || `http://127.0.0.1:${port}`;

function loadKeys(path) {
  if (path && fs.existsSync(path)) {
    return JSON.parse(fs.readFileSync(path, 'utf8'));
  }
  const rsa = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey;
  const ec = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey;
  const keys = {
    keys: [
      { ...rsa.export({ format: 'jwk' }), kid: 'rs-1', use: 'sig', alg: 'RS256' },
      { ...ec.export({ format: 'jwk' }), kid: 'es-1', use: 'sig', alg: 'ES256' },
    ],
  };
  if (path) {
    fs.writeFileSync(path, JSON.stringify(keys), { mode: 0o600 });
  }
  return keys;
}

const ACCOUNTS = {
  alice: { groups: ['platform'], email: 'alice@example.test' },
  bob: { groups: ['dev'], email: 'bob@example.test' },
  carol: { groups: [], email: 'carol@example.test' },
  mallory: { groups: ['<script>alert(1)</script>', 'ops\u202e'], email: '<img src=x onerror=alert(1)>@example.test' },
};

const SERVICE_GROUPS = {
  service: ['automation'],
  'es-service': ['automation'],
  'short-service': ['automation'],
};

function serviceClient(clientId) {
  return {
    client_id: clientId,
    client_secret: `secret-${clientId}`,
    grant_types: ['client_credentials'],
    response_types: [],
    redirect_uris: [],
    token_endpoint_auth_method: 'client_secret_basic',
    scope: 'mcp:tools',
  };
}

function isResourceUrl(text) {
  try {
    const url = new URL(text);
    return url.protocol === 'http:' || url.protocol === 'https:';
  } catch {
    return false;
  }
}

const provider = new Provider(issuer, {
  jwks: loadKeys(process.env.KEYS),
  clients: [
    {
      client_id: 'toolward-tests',
      application_type: 'native',
      token_endpoint_auth_method: 'none',
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      redirect_uris: ['http://127.0.0.1/callback'],
      scope: 'openid offline_access mcp:tools',
    },
    {
      client_id: 'toolward-device',
      application_type: 'native',
      token_endpoint_auth_method: 'none',
      grant_types: ['urn:ietf:params:oauth:grant-type:device_code', 'refresh_token'],
      response_types: [],
      redirect_uris: [],
      scope: 'openid offline_access mcp:tools',
    },
    {
      client_id: 'toolward-console',
      client_secret: 'secret-toolward-console',
      application_type: 'native',
      token_endpoint_auth_method: 'client_secret_basic',
      grant_types: ['authorization_code'],
      response_types: ['code'],
      redirect_uris: ['http://127.0.0.1/oidc/callback'],
      scope: 'openid email groups',
    },
    serviceClient('service'),
    serviceClient('es-service'),
    serviceClient('short-service'),
    // Introspects for the listener (RFC 7662); never asks for tokens itself.
    {
      client_id: 'listener',
      client_secret: 'secret-listener',
      grant_types: [],
      response_types: [],
      redirect_uris: [],
      token_endpoint_auth_method: 'client_secret_basic',
    },
  ],
  scopes: ['openid', 'offline_access', 'mcp:tools', 'email', 'groups'],
  claims: { openid: ['sub'], email: ['email', 'email_verified'], groups: ['groups'] },
  // The claims of the scopes asked for go in the ID token (the console reads them there), not
  // only at the userinfo endpoint.
  conformIdTokenClaims: false,
  async findAccount(_ctx, sub) {
    if (!ACCOUNTS[sub]) return undefined;
    return {
      accountId: sub,
      async claims() {
        return { sub, email: ACCOUNTS[sub].email, email_verified: true, groups: ACCOUNTS[sub].groups };
      },
    };
  },
  async extraTokenClaims(_ctx, token) {
    if (token.accountId && ACCOUNTS[token.accountId]) {
      return { groups: ACCOUNTS[token.accountId].groups };
    }
    if (token.clientId && SERVICE_GROUPS[token.clientId]) {
      return { groups: SERVICE_GROUPS[token.clientId] };
    }
    return undefined;
  },
  interactions: {
    url(_ctx, interaction) {
      return `/interaction/${interaction.uid}`;
    },
  },
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    deviceFlow: { enabled: true },
    introspection: {
      enabled: true,
      async allowedPolicy(_ctx, client) {
        return client.clientId === 'listener';
      },
    },
    revocation: { enabled: true },
    resourceIndicators: {
      enabled: true,
      async defaultResource(_ctx, _client, oneOf) {
        return oneOf;
      },
      async useGrantedResource() {
        return true;
      },
      async getResourceServerInfo(_ctx, resource, client) {
        if (!isResourceUrl(resource)) {
          throw new Provider.errors.InvalidTarget();
        }
        return {
          scope: 'mcp:tools',
          audience: resource,
          accessTokenFormat: process.env.OPAQUE ? 'opaque' : 'jwt',
          accessTokenTTL: client.clientId === 'short-service' ? 2 : 600,
          jwt: { sign: { alg: client.clientId === 'es-service' ? 'ES256' : 'RS256' } },
        };
      },
    },
  },
  pkce: { required: () => true },
  ttl: { AccessToken: 600, RefreshToken: 3600, AuthorizationCode: 60, Interaction: 300, Session: 3600, Grant: 3600 },
  async issueRefreshToken(_ctx, client, code) {
    return client.grantTypeAllowed('refresh_token') && code.scopes.has('offline_access');
  },
  async loadExistingGrant(ctx) {
    const grantId = ctx.oidc.result?.consent?.grantId
      || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
    return grantId ? ctx.oidc.provider.Grant.find(grantId) : undefined;
  },
});

// The interaction: sign in as the `login_hint`, grant what was asked, return at once.
provider.use(async (ctx, next) => {
  const match = /^\/interaction\/([^/]+)$/.exec(ctx.path);
  if (!match || ctx.method !== 'GET') {
    return next();
  }
  const details = await provider.interactionDetails(ctx.req, ctx.res);
  const { prompt, params, session } = details;
  if (prompt.name === 'login') {
    // The device grant's request names no account: its browser adds `login_hint` here.
    const accountId = params.login_hint || ctx.query.login_hint || process.env.DEFAULT_LOGIN;
    if (!ACCOUNTS[accountId]) {
      ctx.status = 400;
      ctx.body = `no account ${accountId}`;
      return undefined;
    }
    await provider.interactionFinished(ctx.req, ctx.res, { login: { accountId } }, { mergeWithLastSubmission: false });
    ctx.respond = false;
    return undefined;
  }
  const grant = details.grantId
    ? await provider.Grant.find(details.grantId)
    : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
  const missing = prompt.details;
  if (missing.missingOIDCScope) grant.addOIDCScope(missing.missingOIDCScope.join(' '));
  if (missing.missingOIDCClaims) grant.addOIDCClaims(missing.missingOIDCClaims);
  for (const [indicator, scopes] of Object.entries(missing.missingResourceScopes || {})) {
    grant.addResourceScope(indicator, scopes.join(' '));
  }
  const grantId = await grant.save();
  await provider.interactionFinished(ctx.req, ctx.res, { consent: { grantId } }, { mergeWithLastSubmission: true });
  ctx.respond = false;
  return undefined;
});

provider.listen(port, '127.0.0.1', () => {
  console.log(`listening ${issuer}`);
});
