// envd 0.6 surface through e2b 2.51, also the e2b that both
// @e2b/code-interpreter 2.7 and 2.8 run on (their filesystem module is it).
import * as sdk from 'e2b-v251'
import { defineEnvdSuite } from '../lib/envd.mjs'

defineEnvdSuite('e2b@2.51', sdk)
