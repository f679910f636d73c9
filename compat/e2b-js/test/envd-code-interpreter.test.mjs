// envd 0.6 surface through both @e2b/code-interpreter SDKs (2.7 and 2.8,
// each on the e2b it resolves), on their code-interpreter-v1 template: their
// Sandbox is e2b's, so files and watches must behave as through e2b itself.
import * as ci28 from '@e2b/code-interpreter'
import * as ci27 from 'code-interpreter-v27'
import { defineEnvdSuite } from '../lib/envd.mjs'

defineEnvdSuite('@e2b/code-interpreter@2.8', ci28, { template: 'code-interpreter-v1' })
defineEnvdSuite('@e2b/code-interpreter@2.7', ci27, { template: 'code-interpreter-v1' })
