// A real OpenID Connect provider (panva's oidc-provider) on 127.0.0.1 for tests/test_external.py.
// Env: PORT; CLIENTS, ACCOUNTS and JWKS as JSON; GITHUB=1 serves it at GitHub's paths with
// GitHub's /api/v3/user and /api/v3/user/emails in front of its own accounts. Prints "ready".
import Provider from 'oidc-provider'

const { PORT, CLIENTS, ACCOUNTS, JWKS, GITHUB } = process.env
const accounts = JSON.parse(ACCOUNTS)
const issuer = `http://127.0.0.1:${PORT}`
const routes = GITHUB ? { authorization: '/login/oauth/authorize', token: '/login/oauth/access_token' } : {}

const provider = new Provider(issuer, {
  clients: JSON.parse(CLIENTS),
  jwks: JSON.parse(JWKS),
  routes,
  scopes: ['openid', 'offline_access', 'email', 'profile', 'read:user', 'user:email'],
  claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name', 'picture', 'preferred_username'] },
  conformIdTokenClaims: false,
  findAccount: (ctx, id) => accounts[id] && { accountId: id, claims: () => ({ sub: id, ...accounts[id] }) },
  features: { devInteractions: { enabled: true } },
})

if (GITHUB) {
  provider.use(async (ctx, next) => {
    if (!ctx.path.startsWith('/api/v3/user')) return next()
    const token = (ctx.get('authorization') || '').replace(/^(Bearer|token) /i, '')
    const found = await provider.AccessToken.find(token)
    const account = found && accounts[found.accountId]
    if (!account) { ctx.status = 401; ctx.body = { message: 'Bad credentials' }; return }
    ctx.type = 'json'
    ctx.body = ctx.path === '/api/v3/user/emails'
      ? [{ email: account.email, primary: true, verified: account.email_verified, visibility: 'public' }]
      : { id: account.github_id, login: found.accountId, name: account.name, avatar_url: account.picture, email: null }
  })
}

provider.listen(Number(PORT), '127.0.0.1', () => console.log('ready'))
