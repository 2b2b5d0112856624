// supabase-js driven call by call from a Python test (support.SupabaseJs), for flows that need the
// test between two calls: following a provider's sign-in or a mailed link. Each line on stdin is
// {"client": name, "call": "auth.signInWithOAuth", "args": [...]}; each answer is one line on stdout,
// "@@" and {"data", "error"} as JSON. A client is made on first use of its name, with
// { auth: { flowType: 'pkce' } } as a server-rendered app configures it: the PKCE verifier stays in
// that client's storage from the call that starts a flow to exchangeCodeForSession.
import { createClient } from '@supabase/supabase-js'
import readline from 'node:readline'
import WebSocket from 'ws' // Node 20 has no WebSocket of its own; supabase-js's Realtime wants one

const { MINIBASE_URL: url, ANON_KEY: anon } = process.env
const clients = {}

function client(name) {
  clients[name] ??= createClient(url, anon, {
    realtime: { transport: WebSocket },
    auth: {
      flowType: 'pkce', persistSession: false, autoRefreshToken: false, detectSessionInUrl: false,
      experimental: { passkey: true }, // auth.passkey.* (and auth.admin.*Passkey*) refuse to run without it
    },
  })
  return clients[name]
}

function plain(error) {
  return error && { name: error.name, code: error.code ?? null, status: error.status ?? null, message: error.message }
}

for await (const line of readline.createInterface({ input: process.stdin })) {
  const { client: name, call, args } = JSON.parse(line)
  const path = call.split('.')
  const method = path.pop()
  const owner = path.reduce((object, key) => object[key], client(name))
  let answer
  try {
    const { data, error } = await owner[method](...args)
    answer = { data, error: plain(error) }
  } catch (thrown) {
    answer = { data: null, error: plain(thrown), thrown: true }
  }
  process.stdout.write('@@' + JSON.stringify(answer) + '\n')
}
