// auth-js's jest.config.js without coverage and prettier (nothing here writes a snapshot), its type
// check left to its own CI, and cli-url.js run before each spec file. tools/auth_js_suite.py copies
// it into the package.
module.exports = {
  preset: 'ts-jest',
  testEnvironment: 'node',
  transform: {
    '^.+\\.tsx?$': ['ts-jest', { tsconfig: '<rootDir>/tsconfig.test.json', diagnostics: false }],
  },
  setupFiles: ['<rootDir>/cli-url.js'],
  testPathIgnorePatterns: ['/node_modules/', '/example/'],
  rootDir: '.',
  silent: true,
  forceExit: true,
  testTimeout: 30000,
}
