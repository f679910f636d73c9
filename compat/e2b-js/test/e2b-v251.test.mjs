// e2b 2.51: v2 create/connect (POST /v2/sandboxes, chunked bodies) and fork.
import * as sdk from 'e2b-v251'
import { defineSuite } from '../lib/suite.mjs'

defineSuite('e2b@2.51', sdk, { fork: true })
