// Plays the person of the device authorization grant (RFC 8628) at the test authorization
// server (provider.mjs): opens the verification URI, enters the user code, signs in as LOGIN
// and grants what the device asked for. Prints `approved` when the provider shows its
// success page.
//
//   node device-approve.mjs VERIFICATION_URI USER_CODE LOGIN
import process from 'node:process';

const [verification, userCode, login] = process.argv.slice(2);
if (!verification || !userCode || !login) {
  console.error('usage: device-approve.mjs VERIFICATION_URI USER_CODE LOGIN');
  process.exit(2);
}

const cookies = new Map();
async function browse(url, init = {}) {
  const response = await fetch(url, {
    ...init,
    redirect: 'manual',
    headers: { ...(init.headers || {}), cookie: [...cookies].map(([k, v]) => `${k}=${v}`).join('; ') },
  });
  for (const line of response.headers.getSetCookie()) {
    const [pair] = line.split(';');
    const at = pair.indexOf('=');
    cookies.set(pair.slice(0, at).trim(), pair.slice(at + 1).trim());
  }
  return response;
}

// The code entry page: its form's `xsrf`, bound to the session cookie just set.
const page = await browse(verification);
const html = await page.text();
const xsrf = /name="xsrf" value="([^"]+)"/.exec(html)?.[1];
if (!xsrf) {
  console.error(`no code entry form at ${verification}: HTTP ${page.status}`);
  process.exit(1);
}
// Entered and confirmed at once (`confirm=yes`, as the confirmation page's form posts).
let response = await browse(verification, {
  method: 'POST',
  headers: { 'content-type': 'application/x-www-form-urlencoded' },
  body: new URLSearchParams({ xsrf, user_code: userCode, confirm: 'yes' }).toString(),
});
let url = verification;
for (let hop = 0; hop < 20; hop += 1) {
  const location = response.headers.get('location');
  if (!location) break;
  const next = new URL(location, url);
  if (/^\/interaction\//.test(next.pathname)) {
    next.searchParams.set('login_hint', login);
  }
  url = next.toString();
  response = await browse(url);
}
const body = await response.text();
if (response.status !== 200 || !/Sign-in Success/.test(body)) {
  console.error(`the device was not approved: HTTP ${response.status} at ${url}: ${body.slice(0, 500)}`);
  process.exit(1);
}
console.log('approved');
