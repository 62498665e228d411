{{- /*
The project's vocabulary, as the chart uses it. Each define is named after its constant
in shared/vocab.py and must render the same string: tests/chart/test_vocabulary.py
compares them, so a rename there fails the chart tests until it is made here too.
*/ -}}
{{- define "gpu-reservation.vocab.PRODUCT_NAME" -}}gpu-reservation{{- end }}
{{- define "gpu-reservation.vocab.CRD_GROUP" -}}galends.io{{- end }}
{{- define "gpu-reservation.vocab.CRD_PLURAL" -}}gpureservations{{- end }}
{{- define "gpu-reservation.vocab.LEADER_LEASE_NAME" -}}gpu-reservation-reconciler{{- end }}
{{- define "gpu-reservation.vocab.GPU_CLASS_LABEL" -}}gpu-class{{- end }}
{{- define "gpu-reservation.vocab.GPU_RESOURCE" -}}nvidia.com/gpu{{- end }}
{{- define "gpu-reservation.vocab.RESERVATION_TAINT_KEY" -}}gpu-class-reservation{{- end }}
{{- define "gpu-reservation.vocab.TAINT_EFFECT_NO_SCHEDULE" -}}NoSchedule{{- end }}
{{- define "gpu-reservation.vocab.ANNOTATION_PREFIX" -}}galends/{{- end }}
{{- define "gpu-reservation.vocab.NAMESPACE_NAME_LABEL" -}}kubernetes.io/metadata.name{{- end }}
