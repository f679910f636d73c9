// Network rules, updates, maskRequestHost and secrets through e2b 2.45 and
// 2.51, one after the other: both read what the one fake web last
// received for a host.
import * as v245 from 'e2b-v245'
import * as v251 from 'e2b-v251'
import { defineNetSuite } from '../lib/net.mjs'

defineNetSuite('e2b@2.45', v245)
defineNetSuite('e2b@2.51', v251)
