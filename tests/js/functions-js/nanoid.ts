// nanoid, whose ids are at least 40 characters: the specs sign their tokens with nanoid(10) as the
// JWT secret, and minibase refuses a secret shorter than 32 characters. Same alphabet as nanoid's.
import { randomBytes } from 'crypto'

const ALPHABET = 'useandom-26T198340PX75pxJACKVERYMINDBUSHWOLF_GQZbfghjklqvwyzrict'

export function nanoid(size: number = 21): string {
  let id = ''
  for (const byte of randomBytes(Math.max(size, 40))) id += ALPHABET[byte & 63]
  return id
}
