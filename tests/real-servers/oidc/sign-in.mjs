// Signs an identity in to the test authorization server (provider.mjs) as the public
// native client `toolward-tests` would, playing the browser too: the authorization code
// with PKCE S256, `state` and `resource` (RFC 8707), the code exchanged at the token
// endpoint, and with `--refresh` the refresh token used once. Prints the token response
// as JSON on stdout (the refreshed one under `refreshed`).
//
//   node sign-in.mjs ISSUER LOGIN RESOURCE [--refresh]
//
// The redirect URI `http://127.0.0.1/callback` is never listened on: the code is read from
// the `Location` of the provider's last redirect.
import crypto from 'node:crypto';

const [issuer, login, resource, ...flags] = process.argv.slice(2);
if (!issuer || !login || !resource) {
  console.error('usage: sign-in.mjs ISSUER LOGIN RESOURCE [--refresh]');
  process.exit(2);
}
const clientId = 'toolward-tests';
const redirectUri = 'http://127.0.0.1/callback';

const metadata = await (await fetch(`${issuer}/.well-known/openid-configuration`)).json();
const verifier = crypto.randomBytes(32).toString('base64url');
const challenge = crypto.createHash('sha256').update(verifier).digest('base64url');
const state = crypto.randomBytes(16).toString('base64url');

const authorize = new URL(metadata.authorization_endpoint);
authorize.search = new URLSearchParams({
  client_id: clientId,
  response_type: 'code',
  redirect_uri: redirectUri,
  scope: 'openid offline_access mcp:tools',
  prompt: 'consent',
  login_hint: login,
  resource,
  state,
  code_challenge: challenge,
  code_challenge_method: 'S256',
}).toString();

// The browser: follow redirects by hand, keeping the cookies the provider sets.
const cookies = new Map();
let url = authorize.toString();
let code;
for (let hop = 0; hop < 20 && !code; hop += 1) {
  const response = await fetch(url, {
    redirect: 'manual',
    headers: { cookie: [...cookies].map(([k, v]) => `${k}=${v}`).join('; ') },
  });
  for (const line of response.headers.getSetCookie()) {
    const [pair] = line.split(';');
    const at = pair.indexOf('=');
    cookies.set(pair.slice(0, at).trim(), pair.slice(at + 1).trim());
  }
  const location = response.headers.get('location');
  if (!location) {
    console.error(`sign-in stopped at ${url}: HTTP ${response.status}: ${await response.text()}`);
    process.exit(1);
  }
  const next = new URL(location, url);
  if (next.origin + next.pathname === redirectUri) {
    if (next.searchParams.get('state') !== state) {
      console.error('the redirect carries another state');
      process.exit(1);
    }
    code = next.searchParams.get('code');
    if (!code) {
      console.error(`the provider refused: ${next.searchParams.get('error')}: ${next.searchParams.get('error_description')}`);
      process.exit(1);
    }
  }
  url = next.toString();
}

async function token(body) {
  const response = await fetch(metadata.token_endpoint, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ client_id: clientId, ...body }).toString(),
  });
  const json = await response.json();
  if (!response.ok) {
    console.error(`the token endpoint refused: ${JSON.stringify(json)}`);
    process.exit(1);
  }
  return json;
}

const tokens = await token({
  grant_type: 'authorization_code',
  code,
  redirect_uri: redirectUri,
  code_verifier: verifier,
  resource,
});
if (flags.includes('--refresh')) {
  tokens.refreshed = await token({
    grant_type: 'refresh_token',
    refresh_token: tokens.refresh_token,
    resource,
  });
}
console.log(JSON.stringify(tokens));
