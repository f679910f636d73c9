// @e2b/code-interpreter 2.8 (its own e2b 2.x inside).
import * as sdk from '@e2b/code-interpreter'
import { defineCodeInterpreterSuite } from '../lib/code-interpreter-suite.mjs'

defineCodeInterpreterSuite('@e2b/code-interpreter@2.8', sdk)
