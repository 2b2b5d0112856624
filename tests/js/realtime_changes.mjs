// supabase-js's postgres_changes against minibase: a table opted in to Realtime, written through
// the SDK's own REST calls, with the serializer VSN names. tests/live/test_realtime_sdks.py runs it and
// checks the one JSON object it prints last.
import { createClient } from '@supabase/supabase-js'
import WebSocket from 'ws' // Node 20 has no WebSocket of its own; supabase-js's Realtime wants one

const { MINIBASE_URL: url, ANON_KEY: anon, VSN: vsn } = process.env // and SERVICE_KEY
const client = createClient(url, anon, { realtime: { transport: WebSocket, vsn }, auth: { persistSession: false } })
const out = { all: [], room2: [] }
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const until = async (test, ms = 5000) => {
  const deadline = Date.now() + ms
  while (!test() && Date.now() < deadline) await sleep(20)
}

const channel = client
  .channel('db-changes')
  .on('postgres_changes', { event: '*', schema: 'public', table: 'messages' }, (payload) => out.all.push(payload))
  .on('postgres_changes', { event: 'INSERT', schema: 'public', table: 'messages', filter: 'room=eq.2' }, (payload) =>
    out.room2.push(payload.new.body)
  )
out.status = await new Promise((resolve) =>
  channel.subscribe((status, error) => (status === 'SUBSCRIBED' || status === 'CHANNEL_ERROR') && resolve([status, error?.message ?? null]))
)
await client.from('messages').insert({ room: 1, body: 'one' })
await client.from('messages').insert({ room: 2, body: 'two' })
await client.from('messages').update({ body: 'one, edited' }).eq('id', 1)
await client.from('messages').delete().eq('id', 2)
await until(() => out.all.length >= 4 && out.room2.length >= 1)
out.all = out.all.map(({ eventType, table, schema, new: row, old, errors, commit_timestamp }) => ({
  eventType, table, schema, new: row, old, errors, stamped: typeof commit_timestamp === 'string',
}))

const refused = client.channel('nope').on('postgres_changes', { event: '*', schema: 'public', table: 'plain' }, () => {})
out.refused = await new Promise((resolve) =>
  refused.subscribe((status, error) => (status === 'SUBSCRIBED' || status === 'CHANNEL_ERROR') && resolve([status, error?.message ?? null]))
)
await client.removeAllChannels()

// A signed-in client: the SDK sends its access token with the join, and the owner rule holds.
const ann = createClient(url, anon, { realtime: { transport: WebSocket, vsn }, auth: { persistSession: false } })
await ann.auth.signUp({ email: `ann-${vsn}@example.com`, password: 'secret-pw' })
out.notes = []
const notes = ann.channel('my-notes').on('postgres_changes', { event: 'INSERT', schema: 'public', table: 'notes' }, (p) =>
  out.notes.push(p.new.body)
)
out.notesStatus = await new Promise((resolve) =>
  notes.subscribe((status, error) => (status === 'SUBSCRIBED' || status === 'CHANNEL_ERROR') && resolve([status, error?.message ?? null]))
)
const admin = createClient(url, process.env.SERVICE_KEY, {
  realtime: { transport: WebSocket },
  auth: { persistSession: false, autoRefreshToken: false },
})
out.otherInsert = (await admin.from('notes').insert({ user_id: 999, body: 'not hers' })).status
await ann.from('notes').insert({ body: 'hers' })
await until(() => out.notes.length >= 1)
await sleep(300)
await ann.removeAllChannels()
console.log(JSON.stringify(out))
process.exit(0)
