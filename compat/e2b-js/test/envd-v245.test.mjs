// envd 0.6 surface (file metadata, watch entries, allowNetworkMounts)
// through e2b 2.45, the first SDK the parity issue names.
import * as sdk from 'e2b-v245'
import { defineEnvdSuite } from '../lib/envd.mjs'

defineEnvdSuite('e2b@2.45', sdk)
