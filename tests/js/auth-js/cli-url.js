// The specs (test/lib/clients.ts) call the Supabase CLI's auth at http://127.0.0.1:54321/auth/v1;
// minibase listens on a free port, MINIBASE_AUTH_URL. auth-js calls the global fetch at each
// request, so wrapping it here, before the spec file loads, points every call there and nothing else.
const CLI = 'http://127.0.0.1:54321/auth/v1'
const target = process.env.MINIBASE_AUTH_URL
const original = globalThis.fetch

globalThis.fetch = (input, init) => {
  const url = typeof input === 'string' ? input : input instanceof URL ? input.href : null
  if (target && url !== null && url.startsWith(CLI)) {
    return original(target + url.slice(CLI.length), init)
  }
  return original(input, init)
}
