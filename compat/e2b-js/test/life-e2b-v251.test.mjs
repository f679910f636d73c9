// The lifecycle lane's cases (pause without memory, metrics over time,
// mcp) through e2b 2.51.
import * as sdk from 'e2b-v251'
import { defineLifeSuite } from '../lib/life-suite.mjs'

defineLifeSuite('e2b@2.51', sdk)
