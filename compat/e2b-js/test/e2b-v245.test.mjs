// e2b 2.45: v1 create/connect (POST /sandboxes), fork, network and the
// envd version gates of the 2.4x line.
import * as sdk from 'e2b-v245'
import { defineSuite } from '../lib/suite.mjs'

defineSuite('e2b@2.45', sdk, { fork: true })
