// supabase-js reading related rows from minibase, as docs/rest.md shows it. tests/rest/test_embed.py
// runs this with the server's URL and anon key in the environment and checks the JSON it prints.
import { createClient } from '@supabase/supabase-js'
import WebSocket from 'ws'

const { MINIBASE_URL: url, ANON_KEY: anon } = process.env
const client = createClient(url, anon, { realtime: { transport: WebSocket }, auth: { persistSession: false } })
const out = {}

const posts = await client.from('posts').select('id, title, author:users(username), comments(body)').order('id')
out.posts = posts.data
const filtered = await client
  .from('users')
  .select('username, posts!inner(title)')
  .like('posts.title', '*ec*')
out.filtered = filtered.data
const ambiguous = await client.from('reviews').select('id, users(username)')
out.ambiguous = ambiguous.error?.code
const single = await client.from('posts').select('id, ...users(username)').eq('id', 3).single()
out.single = single.data
// Aggregates through a to-one spread, as PostgREST groups them (server run with DB_AGGREGATES_ENABLED).
const grouped = await client.from('posts').select('...users(username), n:count()')
out.grouped = grouped.data
console.log(JSON.stringify(out))
