// supabase-js's Realtime (channel, broadcast, presence) against minibase over a real socket, with the
// serializer VSN names (1.0.0 or 2.0.0). tests/live/test_realtime_sdks.py runs it and checks the one
// JSON object it prints last.
import { createClient } from '@supabase/supabase-js'
import WebSocket from 'ws' // Node 20 has no WebSocket of its own; supabase-js's Realtime wants one

const { MINIBASE_URL: url, ANON_KEY: anon, VSN: vsn } = process.env
const options = { realtime: { transport: WebSocket, vsn }, auth: { persistSession: false } }
const ann = createClient(url, anon, options)
const bob = createClient(url, anon, options)
const out = {}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const until = async (test, ms = 5000) => {
  const deadline = Date.now() + ms
  while (!test() && Date.now() < deadline) await sleep(20)
  return test()
}
const subscribed = (channel) =>
  new Promise((resolve) => channel.subscribe((status, error) => status !== 'SUBSCRIBED' && status !== 'CHANNEL_ERROR' ? null : resolve([status, error?.message ?? null])))

// Broadcast: self and ack on ann's side, bob hears every message ann sends
const annSeen = []
const bobSeen = []
const annRoom = ann.channel('room-1', { config: { broadcast: { self: true, ack: true } } })
annRoom.on('broadcast', { event: 'msg' }, ({ payload }) => annSeen.push(payload))
const bobRoom = bob.channel('room-1')
bobRoom.on('broadcast', { event: 'msg' }, ({ payload }) => bobSeen.push(payload))
out.annJoin = await subscribed(annRoom)
out.bobJoin = await subscribed(bobRoom)
out.ack = await annRoom.send({ type: 'broadcast', event: 'msg', payload: { n: 1, text: 'héllo' } })
await bobRoom.send({ type: 'broadcast', event: 'msg', payload: { n: 2 } })
await until(() => annSeen.length >= 2 && bobSeen.length >= 1)
out.annSeen = annSeen
out.bobSeen = bobSeen
out.otherEvent = bobSeen.length

// Presence: bob sees ann arrive, change and leave; ann's socket going away is a leave too
const presence = bob.channel('lobby', { config: { presence: { key: 'bob' } } })
const joins = []
const leaves = []
presence.on('presence', { event: 'join' }, ({ key }) => joins.push(key))
presence.on('presence', { event: 'leave' }, ({ key }) => leaves.push(key))
out.presenceJoin = await subscribed(presence)
await presence.track({ name: 'Bob' })
const annLobby = ann.channel('lobby', { config: { presence: { key: 'ann' } } })
annLobby.on('presence', { event: 'sync' }, () => {})
await subscribed(annLobby)
out.track = await annLobby.track({ name: 'Ann', status: 'online' })
await until(() => joins.includes('ann'))
out.stateAfterTrack = Object.keys(presence.presenceState()).sort()
out.annMeta = presence.presenceState().ann?.[0]?.status ?? null
out.untrack = await annLobby.untrack()
await until(() => leaves.includes('ann'))
out.stateAfterUntrack = Object.keys(presence.presenceState()).sort()
await annLobby.track({ name: 'Ann', status: 'back' })
await until(() => Object.keys(presence.presenceState()).includes('ann'))
out.annSees = Object.keys(annLobby.presenceState()).sort()
leaves.length = 0
ann.realtime.disconnect()
await until(() => leaves.includes('ann'))
out.leftOnDisconnect = Object.keys(presence.presenceState()).sort()

// A private channel with no [realtime] rule that allows it is refused in the join's reply
const secret = bob.channel('secret-room', { config: { private: true } })
out.privateJoin = await subscribed(secret)

await bob.removeAllChannels()
bob.realtime.disconnect()
console.log(JSON.stringify(out))
process.exit(0)
