// A private channel through supabase-js as tests/js pins it, whose user signs out: the SDK sends the
// API key as the channel's token, the topic's policies refuse it, and the channel is closed; what the
// other member says no longer reaches it, and what it sends reaches nobody. tests/live/
// test_realtime_sdks.py runs it and checks the JSON object it prints last.
import { createClient } from '@supabase/supabase-js'
import WebSocket from 'ws' // Node 20 has no WebSocket of its own; realtime-js wants one

const { MINIBASE_URL: url, ANON_KEY: anon, VSN: vsn } = process.env
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const until = async (test, ms = 10000) => {
  const deadline = Date.now() + ms
  while (!test() && Date.now() < deadline) await sleep(20)
}
const user = async (name) => {
  const client = createClient(url, anon, { realtime: { transport: WebSocket, vsn }, auth: { persistSession: false, autoRefreshToken: false } })
  await client.auth.signUp({ email: `${name}-${vsn}@example.com`, password: 'secret-pw' })
  const member = { client, heard: [], statuses: [], system: [] }
  member.channel = client
    .channel('room-1', { config: { private: true } })
    .on('broadcast', { event: '*' }, (message) => member.heard.push(message.event))
    .on('system', {}, (message) => member.system.push(message))
  member.channel.subscribe((status) => member.statuses.push(status))
  await until(() => member.statuses.includes('SUBSCRIBED'))
  return member
}
const ann = await user('ann')
const bob = await user('bob')
const out = {}

await bob.channel.send({ type: 'broadcast', event: 'before-bob', payload: {} })
await ann.channel.send({ type: 'broadcast', event: 'before-ann', payload: {} })
await until(() => ann.heard.length >= 1 && bob.heard.length >= 1)

await ann.client.auth.signOut()
await until(() => ann.statuses.includes('CLOSED'))
out.annSystem = ann.system.map((message) => [message.status, message.message])
out.bobSendAfter = await bob.channel.send({ type: 'broadcast', event: 'after-bob', payload: {} })
out.annSendAfter = await ann.channel.send({ type: 'broadcast', event: 'after-ann', payload: {} })
await sleep(800)
out.annHeard = ann.heard
out.bobHeard = bob.heard
out.annStatuses = [...ann.statuses]
out.bobStatuses = [...bob.statuses]
await bob.client.removeAllChannels()
await ann.client.removeAllChannels()
console.log(JSON.stringify(out))
process.exit(0)
