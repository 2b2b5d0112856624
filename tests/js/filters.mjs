// supabase-js's filter and select helpers against minibase's items table (tests/rest/conftest.py).
// tests/rest/test_operators.py runs this with the server's URL and anon key in the environment and
// checks the JSON it prints.
import { createClient } from '@supabase/supabase-js'
import WebSocket from 'ws'

const { MINIBASE_URL: url, ANON_KEY: anon } = process.env
const client = createClient(url, anon, { realtime: { transport: WebSocket }, auth: { persistSession: false } })
const ids = async (query) => {
  const { data, error } = await query.order('id')
  return error ? error.code ?? error.message : data.map((row) => row.id)
}
const items = () => client.from('items').select('id')
const out = {
  likeAnyOf: await ids(items().likeAnyOf('name', ['*pie', 'Ban*'])),
  likeAllOf: await ids(items().likeAllOf('name', ['a*', '*pie'])),
  ilikeAnyOf: await ids(items().ilikeAnyOf('name', ['apple', 'date'])),
  ilikeAllOf: await ids(items().ilikeAllOf('name', ['*a*', '*e*'])),
  regexMatch: await ids(items().regexMatch('name', '^[A-C]')),
  regexIMatch: await ids(items().regexIMatch('name', '^a')),
  isDistinct: await ids(items().isDistinct('code', 'A1')),
  notRegex: await ids(items().not('name', 'match', 'e')),
  orAny: await ids(items().or('name.like(any).{Ban*,Dat*},id.eq.1')),
}
const cast = await client.from('items').select('id::text, label:name').eq('id', 1).single()
out.cast = cast.data
const tooLong = await items().regexMatch('name', 'a'.repeat(201))
out.tooLong = tooLong.error?.code
console.log(JSON.stringify(out))
