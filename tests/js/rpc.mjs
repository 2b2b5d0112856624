// supabase-js calling minibase's functions as an app calls PostgREST's. tests/rest/test_rpc_rows.py
// runs this with the server's URL and anon key in the environment and checks the JSON it prints.
import { createClient } from '@supabase/supabase-js'
import WebSocket from 'ws'

const { MINIBASE_URL: url, ANON_KEY: anon } = process.env
const client = createClient(url, anon, { realtime: { transport: WebSocket }, auth: { persistSession: false } })
const out = {}

const embedded = await client
  .rpc('docs_from', { first: 2 })
  .select('title, author:authors(name)')
  .eq('author_id', 1)
  .order('title', { ascending: false })
out.embedded = embedded.data
const counted = await client.rpc('docs_from', {}, { head: true, count: 'exact' })
out.counted = [counted.status, counted.count, counted.data]
const got = await client.rpc('docs_from', { first: 4 }, { get: true }).single()
out.got = got.data
const voided = await client.rpc('nothing')
out.voided = [voided.status, voided.data, voided.error]
const missing = await client.rpc('doc', {})
out.missing = missing.error
out.missingStatus = missing.status
console.log(JSON.stringify(out))
