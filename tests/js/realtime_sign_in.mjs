// Apps that subscribe before their user is signed in, as every page does at load: the join carries
// the anon key, the user's token follows (setAuth), and from then on the user's own rows arrive.
// supabase-js as tests/js pins it (with the serializer VSN names), a reload of the signed-in page
// (a new client on the same storage), and realtime-js 2.9 on its own as the slack clone example
// pins it. tests/live/test_realtime_sdks.py runs it and checks the JSON object it prints last.
import { createClient } from '@supabase/supabase-js'
import { RealtimeClient } from 'realtime-js-2.9'
import WebSocket from 'ws' // Node 20 has no WebSocket of its own; realtime-js wants one

const { MINIBASE_URL: url, ANON_KEY: anon, SERVICE_KEY: service, VSN: vsn } = process.env
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const until = async (test, ms = 10000) => {
  const deadline = Date.now() + ms
  while (!test() && Date.now() < deadline) await sleep(20)
}
const subscribed = (channel) =>
  new Promise((resolve) =>
    channel.subscribe((status, error) => (status === 'SUBSCRIBED' || status === 'CHANNEL_ERROR') && resolve([status, error?.message ?? null]))
  )
const seen = (list) => (p) => list.push([p.eventType, p.new?.body ?? p.old?.id ?? null])
const notes = { event: '*', schema: 'public', table: 'journal' }
const items = new Map()
// The browser's storage: a page's session comes back a moment after the page has subscribed, so its
// join carries the anon key and the token follows as an access_token event.
const storage = {
  getItem: async (k) => (await sleep(300), items.get(k) ?? null),
  setItem: (k, v) => void items.set(k, v),
  removeItem: (k) => void items.delete(k),
}
const page = () =>
  createClient(url, anon, {
    realtime: { transport: WebSocket, vsn },
    auth: { storage, persistSession: true, autoRefreshToken: false, detectSessionInUrl: false },
  })
const plain = { realtime: { transport: WebSocket }, auth: { persistSession: false, autoRefreshToken: false } }
const admin = createClient(url, service, plain)
const out = {}

const email = `ann-${vsn}@example.com`
const made = await createClient(url, anon, plain).auth.signUp({ email, password: 'secret-pw' })
const userId = made.data.user.id

// supabase-js: subscribed with no session; a row of the user's written meanwhile is not anon's.
const first = page()
out.first = []
out.firstStatus = await subscribed(first.channel('journal-live').on('postgres_changes', notes, seen(out.first)))
await admin.from('journal').insert({ user_id: userId, body: 'while anonymous' })
await sleep(500)
out.whileAnonymous = out.first.length
// Signing in sends the token (supabase-js calls realtime.setAuth on SIGNED_IN); no rejoin.
await first.auth.signInWithPassword({ email, password: 'secret-pw' })
const row = (await first.from('journal').insert({ body: 'signed in' }).select().single()).data
out.firstId = row.id
await first.from('journal').update({ body: 'edited' }).eq('id', row.id)
await first.from('journal').delete().eq('id', row.id)
await until(() => out.first.length >= 3)
await sleep(300)

// A reload of the signed-in page: a new client on the same storage subscribes at once.
first.realtime.disconnect()
const second = page()
out.reloaded = []
out.reloadedStatus = await subscribed(second.channel('journal-live').on('postgres_changes', notes, seen(out.reloaded)))
await second.from('journal').insert({ body: 'after reload' })
await until(() => out.reloaded.length >= 1)
await sleep(300)
await second.removeAllChannels()

// realtime-js 2.9 alone (the slack clone's): its join carries the API key, setAuth the user's token.
const socketUrl = url.replace(/^http/, 'ws') + '/realtime/v1'
// No transport option: 2.9 sets up a socket it is given only when it makes it itself (its own ws here).
const old = new RealtimeClient(socketUrl, { params: { apikey: anon } })
out.old = []
out.oldStatus = await subscribed(old.channel('journal-2-9').on('postgres_changes', notes, seen(out.old)))
await admin.from('journal').insert({ user_id: userId, body: 'anonymous again' })
await sleep(500)
out.oldWhileAnonymous = out.old.length
const { data } = await second.auth.getSession()
old.setAuth(data.session.access_token)
const again = (await second.from('journal').insert({ body: 'old client' }).select().single()).data
out.oldId = again.id
await second.from('journal').update({ body: 'old client, edited' }).eq('id', again.id)
await second.from('journal').delete().eq('id', again.id)
await until(() => out.old.length >= 3)
await sleep(300)
old.disconnect()
console.log(JSON.stringify(out))
process.exit(0)
