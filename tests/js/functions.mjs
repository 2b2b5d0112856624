// supabase-js's functions.invoke against minibase's /functions/v1, as an app calls it, with the
// test functions of tests/edge/functions. tests/edge/test_supabase_js_functions.py runs this with
// the server's URL and anon key in the environment and checks the one JSON object it prints.
import { createClient } from '@supabase/supabase-js'
import { FunctionsHttpError, FunctionsRelayError } from '@supabase/supabase-js'
import WebSocket from 'ws' // Node 20 has no WebSocket of its own; supabase-js's Realtime wants one

const { MINIBASE_URL: url, ANON_KEY: anon } = process.env
const options = { realtime: { transport: WebSocket }, auth: { persistSession: false } }
const client = createClient(url, anon, options)
const out = {}

out.hello = (await client.functions.invoke('hello')).data
const json = await client.functions.invoke('mirror', { body: { a: [1, 'ü'] }, headers: { 'response-type': 'json' } })
out.json = json.data.body
out.text = (await client.functions.invoke('mirror', { body: 'plain text' })).data.body
const form = new FormData()
form.append('a', '1')
form.append('b', 'two')
out.form = (await client.functions.invoke('mirror', { body: form, headers: { 'response-type': 'form' } })).data.body
const blob = await client.functions.invoke('mirror', {
  body: new Blob([new Uint8Array([104, 105])]),
  headers: { 'response-type': 'blob' },
})
out.blob = JSON.parse(await blob.data.text()).body
const streamed = await client.functions.invoke('stream?n=3', { method: 'GET' })
const reader = streamed.data.body.getReader()
const pieces = []
for (let read = await reader.read(); !read.done; read = await reader.read()) {
  pieces.push(new TextDecoder().decode(read.value))
}
out.stream = pieces.join('')
out.streamType = streamed.response.headers.get('content-type')
const failed = await client.functions.invoke('raises')
out.raises = [failed.error instanceof FunctionsHttpError, failed.error?.context?.status,
  failed.error?.context?.headers.get('sb-error-code')]
const missing = await client.functions.invoke('nothing_here')
out.missing = [missing.error instanceof FunctionsHttpError, missing.error?.context?.status]
const forged = createClient(url, anon, { ...options, global: { headers: { Authorization: 'Bearer not.a.token' } } })
const relay = await forged.functions.invoke('hello')
out.relay = relay.error instanceof FunctionsRelayError
console.log(JSON.stringify(out))
