// A real OpenID provider for the tests (npm `oidc-provider`), on
// 127.0.0.1 at a free port: client-credentials tokens as JWTs for the
// audience `orders-api`, signed RS256 for client `rs-app` and ES256 for
// `es-app` (and any client `appNN`, ES256, for the benchmark); opaque
// (not JWT) tokens for `opaque-app` (5 minutes) and `opaque-short` (2
// seconds), which the client `gateway` (client_secret_basic, secret
// `gateway-secret`) may introspect at /token/introspection; revocation at
// /token/revocation. Prints `listening PORT` once ready. Test-only
// endpoints:
//   POST /_test/rotate       new RS256 and ES256 keys sign from now on;
//                            the previous ones stay published
//   POST /_test/drop_old     only the newest keys stay published
//   GET  /_test/jwks_fetches how many times the JWKS was read
//   GET  /_test/introspections how many introspection requests came
//   POST /_test/sign         signs the JSON body's `claims` with the newest
//                            RS256 key (or as the body's `kid` says), for
//                            tokens the provider would never issue (wrong
//                            aud, expired, unknown kid, ...)
// With CERT and KEY (PEM files), the same provider also listens over
// HTTPS, and its issuer is the HTTPS address: it prints `listening PORT
// TLS_PORT` (the plain port still serves every endpoint).
// Run: node tools/oidc-provider.mjs [NODE_MODULES_DIR [CERT KEY]]
import { readFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import { createRequire } from 'node:module';
import { createPrivateKey, generateKeyPairSync, randomUUID, sign } from 'node:crypto';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const modules = path.resolve(process.argv[2] || 'target/npm/node_modules');
const require = createRequire(path.join(modules, 'x.js'));
const { default: Provider } = await import(pathToFileURL(require.resolve('oidc-provider')).href);

function keyPair(kind) {
  const opts = kind === 'RSA' ? { modulusLength: 2048 } : { namedCurve: 'P-256' };
  const { privateKey } = generateKeyPairSync(kind === 'RSA' ? 'rsa' : 'ec', opts);
  const jwk = privateKey.export({ format: 'jwk' });
  jwk.kid = randomUUID();
  jwk.use = 'sig';
  jwk.alg = kind === 'RSA' ? 'RS256' : 'ES256';
  return jwk;
}

let generations = [[keyPair('RSA'), keyPair('EC')]];
let fetches = 0;
let introspections = 0;
let issuer;
let current;

function clients() {
  const list = [
    { client_id: 'rs-app', client_secret: 'rs-app-secret' },
    { client_id: 'es-app', client_secret: 'es-app-secret' },
    { client_id: 'stranger', client_secret: 'stranger-secret' },
    { client_id: 'opaque-app', client_secret: 'opaque-app-secret' },
    { client_id: 'opaque-short', client_secret: 'opaque-short-secret' },
  ];
  for (let i = 0; i < 100; i++) list.push({ client_id: `app${i}`, client_secret: `app${i}-secret` });
  const all = list.map((c) => ({
    ...c,
    grant_types: ['client_credentials'],
    response_types: [],
    redirect_uris: [],
    token_endpoint_auth_method: 'client_secret_post',
  }));
  all.push({
    client_id: 'gateway',
    client_secret: 'gateway-secret',
    grant_types: ['client_credentials'],
    response_types: [],
    redirect_uris: [],
    token_endpoint_auth_method: 'client_secret_basic',
  });
  return all;
}

function build() {
  // The newest keys first: they sign.
  const keys = generations.slice().reverse().flat();
  const p = new Provider(issuer, {
    clients: clients(),
    jwks: { keys },
    features: {
      clientCredentials: { enabled: true },
      introspection: {
        enabled: true,
        // The gateway may introspect any token; a client, its own.
        allowedPolicy: (ctx, client, token) => client.clientId === 'gateway' || client.clientId === token.clientId,
      },
      revocation: { enabled: true },
      devInteractions: { enabled: false },
      resourceIndicators: {
        enabled: true,
        defaultResource: () => 'urn:orders',
        useGrantedResource: () => true,
        getResourceServerInfo: (ctx, resource, client) => ({
          scope: 'orders:read orders:write',
          audience: 'orders-api',
          accessTokenTTL: client.clientId === 'opaque-short' ? 2 : 300,
          accessTokenFormat: client.clientId.startsWith('opaque') ? 'opaque' : 'jwt',
          jwt: { sign: { alg: client.clientId === 'rs-app' ? 'RS256' : 'ES256' } },
        }),
      },
    },
    extraTokenClaims: () => ({ email: 'svc@example.test' }),
    ttl: { ClientCredentials: (ctx, token) => token.resourceServer?.accessTokenTTL || 600 },
  });
  p.use(async (ctx, next) => {
    if (ctx.path === '/jwks') fetches += 1;
    if (ctx.path === '/token/introspection') introspections += 1;
    await next();
  });
  return p.callback();
}

// The tests stop reading stdout after the `listening` line: a later write
// must not end the provider.
process.stdout.on('error', () => {});

function handle(req, res) {
  if (req.url === '/_test/jwks_fetches') {
    res.end(String(fetches));
  } else if (req.url === '/_test/introspections') {
    res.end(String(introspections));
  } else if (req.url === '/_test/sign' && req.method === 'POST') {
    let body = '';
    req.on('data', (c) => { body += c; });
    req.on('end', () => {
      const { claims, kid } = JSON.parse(body);
      const jwk = generations[generations.length - 1][0];
      const b64 = (v) => Buffer.from(JSON.stringify(v)).toString('base64url');
      const input = `${b64({ alg: 'RS256', typ: 'JWT', kid: kid || jwk.kid })}.${b64(claims)}`;
      const sig = sign('sha256', Buffer.from(input), createPrivateKey({ key: jwk, format: 'jwk' }));
      res.end(`${input}.${sig.toString('base64url')}`);
    });
  } else if (req.url === '/_test/rotate' && req.method === 'POST') {
    generations.push([keyPair('RSA'), keyPair('EC')]);
    current = build();
    res.end('ok');
  } else if (req.url === '/_test/drop_old' && req.method === 'POST') {
    generations = generations.slice(-1);
    current = build();
    res.end('ok');
  } else {
    current(req, res);
  }
}

const server = http.createServer(handle);
server.listen(0, '127.0.0.1', () => {
  const port = server.address().port;
  if (!process.argv[3]) {
    issuer = `http://127.0.0.1:${port}`;
    current = build();
    console.log(`listening ${port}`);
    return;
  }
  const tls = https.createServer(
    { cert: readFileSync(process.argv[3]), key: readFileSync(process.argv[4]) },
    handle,
  );
  tls.listen(0, '127.0.0.1', () => {
    issuer = `https://127.0.0.1:${tls.address().port}`;
    current = build();
    console.log(`listening ${port} ${tls.address().port}`);
  });
});
