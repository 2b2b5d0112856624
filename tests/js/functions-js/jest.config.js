// functions-js's jest.config.ts as JavaScript (no ts-node needed to read it), with nanoid mapped to
// ./nanoid.ts. tools/functions_js_suite.py copies it into the package.
module.exports = {
  preset: 'ts-jest',
  transform: {
    '^.+\\.ts?$': ['ts-jest', { tsconfig: '<rootDir>/tsconfig.test.json', diagnostics: false }],
  },
  moduleFileExtensions: ['ts', 'js', 'cjs', 'json', 'node'],
  moduleNameMapper: { '^nanoid$': '<rootDir>/test/relay/nanoid.ts' },
  setupFilesAfterEnv: ['./test/utils/jest-custom-reporter.ts'],
  testTimeout: 60000,
  maxWorkers: 1,
}
