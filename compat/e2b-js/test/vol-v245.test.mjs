// Volumes through e2b v245 (see lib/vol.mjs).
import * as sdk from 'e2b-v245'
import { defineVolumeSuite } from '../lib/vol.mjs'

defineVolumeSuite('e2b@v245', sdk)
