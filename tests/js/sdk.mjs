// supabase-js against minibase, as an app calls it. tests/test_supabase_js.py runs this with the
// server's URL and keys in the environment and checks what it prints: one JSON object of results.
import { createClient } from '@supabase/supabase-js'
import WebSocket from 'ws' // Node 20 has no WebSocket of its own; supabase-js's Realtime wants one
import * as OTPAuth from 'otpauth'

const { MINIBASE_URL: url, ANON_KEY: anon, SERVICE_KEY: service } = process.env
const options = { realtime: { transport: WebSocket }, auth: { persistSession: false } }
const client = createClient(url, anon, options)
const admin = createClient(url, service, { ...options, auth: { ...options.auth, autoRefreshToken: false } })
const out = {}

const events = []
client.auth.onAuthStateChange((event) => events.push(event))

out.weak = (await client.auth.signUp({ email: 'js@example.com', password: '123' })).error?.code
const signedUp = await client.auth.signUp({ email: 'js@example.com', password: 'secret-pw' })
out.userId = signedUp.data.user.id
out.wrong = (await client.auth.signInWithPassword({ email: 'js@example.com', password: 'nope-nope' })).error?.code
await client.auth.signInWithPassword({ email: 'js@example.com', password: 'secret-pw' })
out.updated = (await client.auth.updateUser({ data: { pet: 'cat' } })).data.user.user_metadata.pet
out.refreshed = !!(await client.auth.refreshSession()).data.session?.access_token

const inserted = await client.from('notes').insert({ body: 'from js' }, { count: 'exact' }).select()
out.insertCount = inserted.count
out.ownerMatches = String(inserted.data[0].user_id) === out.userId
out.duplicate = (await client.from('tags').insert([{ id: 1, name: 'a' }, { id: 1, name: 'b' }])).error?.code
out.single = (await client.from('tags').select('*').eq('name', 'nope').single()).error?.code
out.maybe = (await client.from('tags').select('*').eq('name', 'nope').maybeSingle()).data
await client.from('tags').insert([{ name: 'red' }, { name: 'blue' }])
out.upsert = (await client.from('tags').upsert({ name: 'red', uses: 3 }, { onConflict: 'name' }).select()).data[0].uses
const counted = await client.from('tags').select('*', { count: 'exact' }).range(0, 0)
out.total = counted.count
out.csv = (await client.from('tags').select('name').order('name').csv()).data
out.deleted = (await client.from('tags').delete({ count: 'exact' }).eq('name', 'blue')).count

const listed = await admin.auth.admin.listUsers()
out.listed = listed.data.users.map((u) => u.email)
out.total_users = listed.data.total
const uuid = '00000000-0000-0000-0000-' + out.userId.padStart(12, '0')
out.fetched = (await admin.auth.admin.getUserById(uuid)).data.user?.email
const link = await admin.auth.admin.generateLink({ type: 'magiclink', email: 'js@example.com' })
out.linkType = link.data.properties?.verification_type
const verified = await client.auth.verifyOtp({ email: 'js@example.com', token: link.data.properties?.email_otp, type: 'magiclink' })
out.verified = verified.data.user?.email ?? verified.error?.message
await admin.auth.admin.updateUserById(uuid, { ban_duration: '1h' })
out.banned = (await client.auth.signInWithPassword({ email: 'js@example.com', password: 'secret-pw' })).error?.code

// A second factor: enroll, verify, the assurance level, listFactors, unenroll (codes from otpauth).
const mfaUser = createClient(url, anon, options)
await mfaUser.auth.signUp({ email: 'mfa-js@example.com', password: 'secret-pw' })
const enrolled = (await mfaUser.auth.mfa.enroll({ factorType: 'totp', friendlyName: 'phone' })).data
out.qr = enrolled.totp.qr_code.slice(0, 30)
const totp = new OTPAuth.TOTP({ secret: OTPAuth.Secret.fromBase32(enrolled.totp.secret) })
const used = totp.generate()
const verifiedMfa = await mfaUser.auth.mfa.challengeAndVerify({ factorId: enrolled.id, code: used })
out.mfaError = verifiedMfa.error?.code ?? null
const level = (await mfaUser.auth.mfa.getAuthenticatorAssuranceLevel()).data
out.level = [level.currentLevel, level.nextLevel]
out.methods = level.currentAuthenticationMethods.map((entry) => entry.method)
out.totpFactors = (await mfaUser.auth.mfa.listFactors()).data.totp.map((factor) => factor.id === enrolled.id)
out.refreshedLevel = (await mfaUser.auth.mfa.getAuthenticatorAssuranceLevel(
  (await mfaUser.auth.refreshSession()).data.session.access_token)).data.currentLevel
const second = createClient(url, anon, options)
await second.auth.signInWithPassword({ email: 'mfa-js@example.com', password: 'secret-pw' })
const secondLevel = (await second.auth.mfa.getAuthenticatorAssuranceLevel()).data
out.secondLevel = [secondLevel.currentLevel, secondLevel.nextLevel]
out.aal1Unenroll = (await second.auth.mfa.unenroll({ factorId: enrolled.id })).error?.code
out.replay = (await second.auth.mfa.challengeAndVerify({ factorId: enrolled.id, code: used })).error?.code
out.unenrolled = (await mfaUser.auth.mfa.unenroll({ factorId: enrolled.id })).data?.id === enrolled.id

await client.auth.signOut()
out.events = events
console.log(JSON.stringify(out))
process.exit(0)
