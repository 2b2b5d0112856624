// What supabase-js's own Realtime integration tests check against a Supabase server (its
// test/integration.test.ts: "Realtime with vsn" and "Custom JWT"), done here against minibase with
// the serializer VSN. Each check's outcome ("ok" or its error) goes into the one JSON object printed
// last; tests/live/test_supabase_js_realtime.py runs it and reads that.
import { createHmac, randomUUID } from 'node:crypto'
import { createClient } from '@supabase/supabase-js'
import WebSocket from 'ws' // Node 20 has no WebSocket of its own

const { MINIBASE_URL: url, ANON_KEY: anon, JWT_SECRET: secret, VSN: vsn } = process.env
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const check = (ok, what) => {
  if (!ok) throw new Error(what)
}
const until = async (test, what, ms = 5000) => {
  const deadline = Date.now() + ms
  while (!test()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await sleep(50)
  }
}
const subscribed = (channel, ms = 8000) =>
  new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${channel.topic} not subscribed`)), ms)
    channel.subscribe((status, error) => {
      if (status === 'SUBSCRIBED') {
        clearTimeout(timer)
        resolve()
      } else if (status === 'CHANNEL_ERROR' || status === 'TIMED_OUT') {
        clearTimeout(timer)
        reject(error || new Error(status))
      }
    })
  })

// As their beforeEach: a client of its own, a user signed up (and so signed in), and a private
// channel whose name their policies (and ours, in the test's tables.toml) allow.
const name = `channel-${randomUUID()}`
async function signedUpClient() {
  const supabase = createClient(url, anon, { realtime: { heartbeatIntervalMs: 500, vsn, transport: WebSocket } })
  await supabase.auth.signOut()
  const { error } = await supabase.auth.signUp({ email: `test-${randomUUID()}@example.com`, password: 'password123' })
  check(!error, `sign-up failed: ${error?.message}`)
  const channel = supabase.channel(name, { config: { broadcast: { ack: true, self: true }, private: true } })
  return { supabase, channel }
}

const checks = {
  async connectAndBroadcast({ supabase, channel }) {
    let received
    channel.on('broadcast', { event: 'test-event' }, (payload) => (received = payload))
    await subscribed(channel)
    await channel.send({ type: 'broadcast', event: 'test-event', payload: { message: 'test' } })
    await until(() => received, 'the broadcast')
    check(received.payload.message === 'test', `payload ${JSON.stringify(received)}`)
    check(supabase.realtime.getChannels().length === 1, 'one channel')
  },
  async switchingChannelsKeepsTheSocket({ supabase }) {
    const config = { broadcast: { ack: true, self: true }, private: true }
    const first = supabase.channel(`${name}-a`, { config })
    await subscribed(first)
    await supabase.removeChannel(first)
    check(supabase.realtime.isConnected(), 'connected after removing the first channel')
    const second = supabase.channel(`${name}-b`, { config }).on('broadcast', { event: 'ping' }, () => {})
    await subscribed(second)
    check(supabase.realtime.isConnected(), 'connected after joining the second')
  },
  async removeChannelDisconnectsLater({ supabase, channel }) {
    await subscribed(channel)
    check(supabase.realtime.isConnected(), 'connected')
    await supabase.removeChannel(channel)
    check(supabase.realtime.isConnected(), 'still connected at once')
    await sleep(1200)
    check(!supabase.realtime.isConnected(), 'disconnected after two heartbeats')
  },
  async unsubscribeDisconnectsLater({ supabase, channel }) {
    await subscribed(channel)
    await channel.unsubscribe()
    check(supabase.realtime.isConnected(), 'still connected at once')
    await sleep(1200)
    check(!supabase.realtime.isConnected(), 'disconnected after two heartbeats')
  },
  async removeAllChannelsDisconnectsAtOnce({ supabase }) {
    await Promise.all([subscribed(supabase.channel(`${name}-a`)), subscribed(supabase.channel(`${name}-b`))])
    check(supabase.realtime.isConnected(), 'connected')
    await supabase.removeAllChannels()
    check(!supabase.realtime.isConnected(), 'disconnected at once')
  },
  async httpSendJsonToAPublicChannel({ supabase }) {
    let received
    const open = supabase.channel(`public-${randomUUID()}`, { config: { broadcast: { self: true } } })
    open.on('broadcast', { event: 'json' }, (payload) => (received = payload))
    await subscribed(open)
    const result = await open.httpSend('json', { hello: 'public' })
    check(result?.success === true, `httpSend answered ${JSON.stringify(result)}`)
    await until(() => received, 'the broadcast')
    check(JSON.stringify(received.payload) === '{"hello":"public"}', `payload ${JSON.stringify(received)}`)
  },
  async httpSendJsonToAPrivateChannel({ channel }) {
    let received
    channel.on('broadcast', { event: 'json-private' }, (payload) => (received = payload))
    await subscribed(channel)
    const result = await channel.httpSend('json-private', { hello: 'private' })
    check(result?.success === true, `httpSend answered ${JSON.stringify(result)}`)
    await until(() => received, 'the broadcast')
    check(JSON.stringify(received.payload) === '{"hello":"private"}', `payload ${JSON.stringify(received)}`)
  },
  async httpSendBytesToAPrivateChannel({ channel }) {
    if (vsn !== '2.0.0') return 'skipped' // as theirs: bytes need the 2.0.0 serializer
    let received
    channel.on('broadcast', { event: 'binary' }, (payload) => (received = payload))
    await subscribed(channel)
    const bytes = new Uint8Array([1, 2, 3, 4, 5])
    const result = await channel.httpSend('binary', bytes)
    check(result?.success === true, `httpSend answered ${JSON.stringify(result)}`)
    await until(() => received, 'the broadcast')
    check(Buffer.from(new Uint8Array(received.payload)).equals(Buffer.from(bytes)), 'the same bytes')
  },
}

// Their "Custom JWT": an anon JWT signed with the project's secret, given by accessToken().
function signed(claims) {
  const part = (value) => Buffer.from(JSON.stringify(value)).toString('base64url')
  const now = Math.floor(Date.now() / 1000)
  const body = `${part({ alg: 'HS256', typ: 'JWT' })}.${part({ ...claims, iat: now, exp: now + 3600 })}`
  return `${body}.${createHmac('sha256', secret).update(body).digest('base64url')}`
}
async function customJwt() {
  const jwt = signed({ sub: '1234567890', role: 'anon', iss: 'supabase-demo' })
  const supabase = createClient(url, anon, { accessToken: () => Promise.resolve(jwt), realtime: { transport: WebSocket } })
  try {
    await subscribed(supabase.channel('test-channel'), 4000)
    check(supabase.realtime.accessTokenValue === jwt, 'the socket holds the token')
  } finally {
    await supabase.removeAllChannels()
  }
}

const out = {}
for (const [label, run] of Object.entries(checks)) {
  const setup = await signedUpClient()
  try {
    out[label] = (await run(setup)) || 'ok'
  } catch (error) {
    out[label] = String(error?.message || error)
  } finally {
    await setup.supabase.removeAllChannels()
  }
}
try {
  await customJwt()
  out.customJwt = 'ok'
} catch (error) {
  out.customJwt = String(error?.message || error)
}
console.log(JSON.stringify(out))
process.exit(0)
