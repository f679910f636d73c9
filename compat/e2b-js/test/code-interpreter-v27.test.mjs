// @e2b/code-interpreter 2.7, the release the E2B-parity issue names.
import * as sdk from 'code-interpreter-v27'
import { defineCodeInterpreterSuite } from '../lib/code-interpreter-suite.mjs'

defineCodeInterpreterSuite('@e2b/code-interpreter@2.7', sdk)
