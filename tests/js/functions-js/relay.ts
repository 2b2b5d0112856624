// minibase in place of functions-js's test/relay/container.ts (a Docker container running Deno's
// relay): runRelay(slug, jwtSecret) starts `python wsgi.py` with that JWT_SECRET and
// tests/edge/functions as its FUNCTIONS_DIR (the four test functions written in Python), and the
// Relay it returns answers the specs' `http://localhost:${relay.container.getMappedPort(8081)}`
// with minibase's port followed by /functions/v1, where the functions are served. The relay gave
// each function DENO_ORIGIN (the origin its request URL shows); minibase gives it the same through
// FUNCTIONS_ENV_FILE. tools/functions_js_suite.py copies this file over the original.
import { ChildProcess, spawn } from 'child_process'
import * as fs from 'fs'
import * as net from 'net'
import * as os from 'os'
import * as path from 'path'

const ROOT = process.env.MINIBASE_ROOT as string
const PYTHON = process.env.MINIBASE_PYTHON as string
const FUNCTIONS = process.env.MINIBASE_FUNCTIONS as string
const START_SECONDS = 60

class Minibase {
  constructor(
    private child: ChildProcess,
    private port: number,
    private dir: string
  ) {}

  getMappedPort(_port?: number): string {
    return `${this.port}/functions/v1`
  }

  async stop(): Promise<void> {
    if (this.child.exitCode === null) {
      const exited = new Promise((resolve) => this.child.once('exit', resolve))
      this.child.kill('SIGTERM')
      await exited
    }
    fs.rmSync(this.dir, { recursive: true, force: true })
  }
}

export class Relay {
  constructor(
    public container: Minibase,
    public id: string
  ) {}

  async stop(): Promise<void> {
    await this.container.stop()
  }
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const port = (server.address() as net.AddressInfo).port
      server.close(() => resolve(port))
    })
  })
}

export async function runRelay(
  slug: string,
  jwtSecret: string,
  denoOrigin: string = 'http://localhost:8000',
  env?: Map<string, string>
): Promise<Relay> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `minibase-relay-${slug}-`))
  const lines = [`DENO_ORIGIN=${denoOrigin}`, ...Array.from(env ?? [], ([k, v]) => `${k}=${v}`)]
  fs.writeFileSync(path.join(dir, 'functions.env'), lines.join('\n') + '\n')
  const port = await freePort()
  const log = fs.openSync(path.join(dir, 'minibase.log'), 'a')
  const child = spawn(PYTHON, ['wsgi.py'], {
    cwd: ROOT,
    stdio: ['ignore', log, log],
    env: {
      ...process.env,
      JWT_SECRET: jwtSecret,
      HOST: '127.0.0.1',
      PORT: String(port),
      DATABASE_URL: `sqlite:///${dir}/minibase.db`,
      STORAGE_ROOT: path.join(dir, 'storage'),
      FUNCTIONS_DIR: FUNCTIONS,
      FUNCTIONS_ENV_FILE: path.join(dir, 'functions.env'),
      RATE_LIMITS: 'off',
    },
  })
  const relay = new Relay(new Minibase(child, port, dir), slug)
  for (let waited = 0; waited < START_SECONDS * 5; waited++) {
    try {
      if ((await fetch(`http://127.0.0.1:${port}/health`)).ok) return relay
    } catch {
      /* not up yet */
    }
    if (child.exitCode !== null) break
    await new Promise((resolve) => setTimeout(resolve, 200))
  }
  const said = fs.readFileSync(path.join(dir, 'minibase.log'), 'utf8')
  await relay.stop()
  throw new Error(`minibase did not start for ${slug}:\n${said.slice(-3000)}`)
}
